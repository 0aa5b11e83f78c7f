"""`vllm serve` as a child process on 127.0.0.1, for the serving test, the
demo and the benchmark."""

import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`vllm serve MODEL_DIR ARGS...` (the vllm-rbln wheel's `vllm` command,
    vllm_rbln.cli) with its output in `log_path`; `env` is added to this
    process's environment. Use as a context manager, or start()/stop()."""

    def __init__(self, model_dir: str, args, log_path: str, env=None,
                 start_timeout_s: float = 600):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._cmd = [sys.executable, "-m", "vllm_rbln.cli", "serve", model_dir,
                     "--host", "127.0.0.1", "--port", str(self.port)] + [str(a) for a in args]
        self._env = dict(os.environ, **(env or {}))
        self._timeout = start_timeout_s
        self._proc = None
        self._log = None

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def start(self) -> "Server":
        import httpx

        self._log = open(self.log_path, "w")
        self._proc = subprocess.Popen(self._cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                      env=self._env)
        deadline = time.monotonic() + self._timeout
        while True:
            if self._proc.poll() is not None:
                self._log.close()
                raise RuntimeError(f"vllm serve exited with {self._proc.returncode}:\n"
                                   + self.log()[-4000:])
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"vllm serve not up after {self._timeout} s:\n"
                                   + self.log()[-4000:])
            time.sleep(1)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log is not None and not self._log.closed:
            self._log.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
