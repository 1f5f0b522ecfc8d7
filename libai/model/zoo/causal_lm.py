"""What the zoo's causal language models (GPT-2, Llama) share, written once: :class:`CausalLM`."""

from __future__ import annotations

from typing import Any

import torch

from ..generation import generate
from ..layers import causal_lm_outputs, forward_in_parts, lm_items

__all__ = ["CausalLM"]


class CausalLM:
    """Mixin of a decoder with an LM head: ``class GPTForCausalLM(CausalLM, nn.Module)``.

    It assumes ``self.transformer``, the decoder stack (called as ``transformer(input_ids,
    kv_caches, attention_mask, position_ids) -> hidden (B, S, H)`` after its final norm, with
    ``.blocks``, ``.final_norm`` and ``.new_kv_caches``), and :meth:`head_logits`. It gives the
    training ``forward`` (the pipeline parts in a row), ``logits`` and ``new_kv_caches`` for
    :func:`libai.model.generation.generate`, and the contract's ``pipeline_last`` and
    ``count_items``; the family writes ``pipeline_split``, ``pipeline_first`` and
    ``pipeline_block_kwargs``. Override any of them for a decoder that differs.
    """

    transformer: Any
    training: bool

    def head_logits(self, h: torch.Tensor) -> torch.Tensor:
        """The LM head: hidden states (B, S, H) after the final norm to logits (B, S, V)."""
        raise NotImplementedError

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return forward_in_parts(self, self.transformer.blocks, batch)

    def new_kv_caches(self, batch_size: int) -> list[Any]:
        """Empty caches, one per block (see the decoder stack's ``new_kv_caches``)."""
        return self.transformer.new_kv_caches(batch_size)

    def logits(self, input_ids: torch.Tensor, kv_caches: list[Any] | None = None,
               attention_mask: torch.Tensor | None = None,
               position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token logits (B, S, V) for every position of ``input_ids`` (B, S); the other
        arguments are the decoder stack's."""
        h = self.transformer(input_ids, kv_caches, attention_mask, position_ids)  # (B, S, H)
        return self.head_logits(h)

    def pipeline_last(self, h: torch.Tensor, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The last block's output (B, S, H) to what ``forward`` returns."""
        logits = self.head_logits(self.transformer.final_norm(h))  # (B, S, V)
        return causal_lm_outputs(logits, batch.get("labels"), self.training, type(self).__name__)

    def count_items(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The ``num_items`` of a training batch, from the batch alone."""
        return lm_items(batch, "labels", "loss")

    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, do_sample: bool = False,
                 eos_token_id: int | list[int] | None = None,
                 generator: torch.Generator | None = None,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Continue ``input_ids`` (B, S) by up to ``max_new_tokens`` tokens; returns (B, S + n).

        :func:`libai.model.generation.generate` on this model, where the arguments are
        described; ``attention_mask`` (B, S) batches prompts of different lengths padded on
        the left. Temperature 0 is greedy.
        """
        return generate(self, input_ids, max_new_tokens, attention_mask=attention_mask,
                        temperature=temperature, top_k=top_k, top_p=top_p, do_sample=do_sample,
                        eos_token_id=eos_token_id, generator=generator)
