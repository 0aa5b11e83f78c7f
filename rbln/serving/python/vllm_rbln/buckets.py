"""Static shapes for the model step (no vLLM here).

The rbln compiler builds one program per input shape, so a scheduler step is
padded to one of a few fixed shapes (the seeds' advice for services: static
batch sizes and sequence lengths, padding, buckets). A step is one call, as
on a GPU: every new token of every request -- decodes, prompts, chunks of
prompts, the part after cached prefix blocks -- packed into one row of
tokens, padded to a token bucket (1, 2, 4, ... up to max_num_batched_tokens,
the scheduler's token budget per step, so a step always fits one call).
Each token row carries its own position and its request's block-table row:
attention (torch.ops.rbln.paged_attention) treats every row as a query of
length 1 that sees keys 0..position of its request, which is causal
attention within a prompt and decode alike, so tokens of different
requests and phases share the call. The logits are computed for the last
token of each request: min(tokens, max_num_seqs) rows.

One call per step also keeps the KV cache consistent without ordering: with
prefix caching vLLM may hand a request blocks that another request of the
same step fills; every layer writes the whole step's keys and values before
its attention reads them.

All programs are compiled at warm-up; a step after that never compiles.
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


@dataclass(frozen=True, order=True)
class Call:
    """One program call: `tokens` token rows (the step's new tokens, request
    by request, then padding) and `rows` logits rows (one per request, then
    padding)."""

    tokens: int
    rows: int


class Buckets:
    def __init__(self, max_num_seqs: int, max_tokens: int):
        if max_num_seqs < 1 or max_tokens < 1:
            raise ValueError(f"rbln buckets: max_num_seqs={max_num_seqs} and "
                             f"max_num_batched_tokens={max_tokens} must be positive")
        self.max_num_seqs = max_num_seqs
        self.tokens = _powers_of_two_up_to(1, max_tokens)

    def _call(self, tokens: int) -> Call:
        return Call(tokens, min(tokens, self.max_num_seqs))

    def shapes(self) -> list:
        """Every call a step may make, smallest first."""
        return [self._call(t) for t in self.tokens]

    def plan(self, query_lens) -> Call:
        """The call of a step whose requests have `query_lens` new tokens."""
        total, requests = int(sum(query_lens)), len(query_lens)
        if requests > self.max_num_seqs:
            raise ValueError(f"rbln buckets: a step of {requests} requests exceeds "
                             f"max_num_seqs={self.max_num_seqs}")
        for t in self.tokens:
            if t >= total:
                return self._call(t)
        raise ValueError(f"rbln buckets: a step of {total} tokens exceeds the largest bucket "
                         f"{self.tokens[-1]} (max_num_batched_tokens)")
