"""Static shapes for the model step (no vLLM here).

The rbln compiler builds one program per input shape, so a scheduler step is
cut into calls of a few fixed shapes (the seeds' advice for services: static
batch sizes and sequence lengths, padding, buckets):
  * decode: every request with one new token, together, padded to a batch
    bucket (1, 2, 4, ... up to max_num_seqs): a grid of B x 1, reading a
    block table of a context bucket (min_table_blocks, 2 * min_table_blocks,
    ... up to the blocks of max_model_len) that covers the longest context
    of the call: attention reads and gathers the blocks of the table, so a
    decode of short sequences does not pay for max_model_len (vLLM's GPU
    kernels read only the real context);
  * prefill: each request with more than one new token (a prompt, a chunk of
    one, the part after cached prefix blocks) alone, padded to a length
    bucket (min_prefill, 2 * min_prefill, ... up to the longest chunk the
    scheduler hands out): a grid of 1 x Q over the whole block table (one
    request's gather is small next to its Q tokens' work).
All programs are compiled at warm-up; a step after that never compiles.

Calls of one step run in an order that respects the KV cache: with prefix
caching, vLLM may hand a request blocks that another request of the same
step is still to fill (both prompts start alike; vLLM caches a block when it
schedules the tokens that fill it). On a GPU every layer writes the whole
batch's keys and values before any attention reads them; here each call runs
all layers, so a call that fills a block runs before the calls that read it
(`order`).
"""

from dataclasses import dataclass


def _powers_of_two_up_to(start: int, limit: int) -> list:
    sizes = []
    n = start
    while n < limit:
        sizes.append(n)
        n *= 2
    sizes.append(limit)
    return sizes


@dataclass(frozen=True)
class Call:
    """One program call: `batch` x `q_len` grid over `requests` (indices into
    the step's requests, in grid order), each reading a block table of
    `table_blocks` blocks."""

    batch: int
    q_len: int
    requests: tuple
    table_blocks: int


class Buckets:
    def __init__(self, max_num_seqs: int, max_prefill: int, table_blocks: int,
                 min_prefill: int = 16, min_table_blocks: int = 4):
        if max_num_seqs < 1 or max_prefill < 1 or table_blocks < 1:
            raise ValueError(f"rbln buckets: max_num_seqs={max_num_seqs}, "
                             f"max_prefill={max_prefill} and table_blocks={table_blocks} "
                             "must be positive")
        self.decode = _powers_of_two_up_to(1, max_num_seqs)
        self.prefill = _powers_of_two_up_to(min(min_prefill, max_prefill), max_prefill)
        self.table_blocks = table_blocks
        self.decode_tables = _powers_of_two_up_to(min(min_table_blocks, table_blocks),
                                                  table_blocks)

    def shapes(self) -> list:
        """Every (batch, q_len, table_blocks) a step may call, decode first."""
        return ([(b, 1, nb) for b in self.decode for nb in self.decode_tables] +
                [(1, q, self.table_blocks) for q in self.prefill])

    @staticmethod
    def _fit(sizes, n, what):
        for s in sizes:
            if s >= n:
                return s
        raise ValueError(f"rbln buckets: {what} {n} exceeds the largest bucket {sizes[-1]}")

    def plan(self, query_lens, context_blocks) -> list:
        """The calls of a step whose requests have `query_lens` new tokens and
        read `context_blocks` blocks each (their tokens so far, these
        included)."""
        decodes = [r for r, n in enumerate(query_lens) if n == 1]
        calls = []
        largest = self.decode[-1]
        for i in range(0, len(decodes), largest):
            part = tuple(decodes[i:i + largest])
            blocks = max(context_blocks[r] for r in part)
            calls.append(Call(self._fit(self.decode, len(part), "decode batch"), 1, part,
                              self._fit(self.decode_tables, blocks, "context of blocks")))
        for r, n in enumerate(query_lens):
            if n > 1:
                calls.append(Call(1, self._fit(self.prefill, n, "prefill chunk of"), (r,),
                                  self.table_blocks))
        return calls


def order(calls, writes, reads) -> list:
    """`calls` sorted so that a call writing a block runs before every other
    call reading it; `writes[r]` / `reads[r]`: the blocks request r fills in
    this step / reads from earlier tokens. Otherwise the order is kept."""
    written = [set().union(*(writes[r] for r in c.requests)) for c in calls]
    read = [set().union(*(reads[r] for r in c.requests)) for c in calls]
    before = [{j for j in range(len(calls)) if j != i and written[j] & read[i]}
              for i in range(len(calls))]
    done, ordered = set(), []
    while len(ordered) < len(calls):
        ready = [i for i in range(len(calls)) if i not in done and before[i] <= done]
        if not ready:
            raise RuntimeError(
                "rbln: the calls of a step read blocks each other fills (a cycle); "
                f"calls {calls}, blocks written {written}, read {read}")
        done.add(ready[0])
        ordered.append(calls[ready[0]])
    return ordered
