"""Length-grouped sampling: batches of similar lengths, so dynamic padding pads little.

Hugging Face's ``group_by_length`` is the reference: the epoch order is shuffled as
:class:`DefaultSampler` shuffles it, then cut into mega-batches of ``mega_batch_mult`` batches
(of every rank together), and each mega-batch is sorted by length, longest first. Batches stay
random in which samples they meet across epochs, while the tokens in a batch are nearly all real.
Everything else (determinism, rank split, resume by :meth:`skip`, the state) is
:class:`DefaultSampler`'s.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized

import numpy as np

from libai.registry import DATA_SAMPLERS
from libai.utils.errors import ConfigError, DataError

from .sampler import DefaultSampler

__all__ = ["LengthGroupedSampler"]


@DATA_SAMPLERS.register_module()
class LengthGroupedSampler(DefaultSampler):
    """:class:`DefaultSampler` whose epoch order groups samples of similar lengths.

    Args:
        dataset: The dataset; its lengths come from ``dataset.lengths`` (a sequence of ints,
            what :class:`~libai.data.text.LabeledTextDataset` has) unless ``lengths`` is given.
        batch_size: The data loader's batch size (the loader passes it). Defaults to 1.
        mega_batch_mult: Batches per sorted group. Defaults to 50 (Hugging Face's).
        lengths: The sample lengths. Defaults to None: ``dataset.lengths``.
        **kwargs: :class:`DefaultSampler`'s arguments (shuffle, seed, round_up, rank,
            world_size, seed_per_sample).

    Raises:
        DataError: No lengths, or as many as the dataset has not.
        ConfigError: ``mega_batch_mult`` below 1.
    """

    def __init__(self, dataset: Sized, batch_size: int = 1, mega_batch_mult: int = 50,
                 lengths: Sequence[int] | None = None, **kwargs) -> None:
        super().__init__(dataset, **kwargs)
        lengths = getattr(dataset, "lengths", None) if lengths is None else lengths
        if lengths is None or len(lengths) != self.size:
            raise DataError(
                f"LengthGroupedSampler needs the length of every sample: "
                f"{type(dataset).__name__} has no 'lengths' attribute with {self.size} entries; "
                f"pass sampler=dict(type='LengthGroupedSampler', lengths=[...]).")
        if isinstance(mega_batch_mult, bool) or not isinstance(mega_batch_mult, int) \
                or mega_batch_mult < 1:
            raise ConfigError(f"LengthGroupedSampler: mega_batch_mult must be an int >= 1, got "
                              f"{mega_batch_mult!r}.")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.group = max(1, int(batch_size)) * self.world_size * mega_batch_mult

    def epoch_indices(self) -> list[int]:
        order = np.asarray(super().epoch_indices(), dtype=np.int64)
        out = []
        for start in range(0, len(order), self.group):
            chunk = order[start:start + self.group]
            out.append(chunk[np.argsort(-self.lengths[chunk], kind="stable")])
        return np.concatenate(out).tolist() if out else []

    def __repr__(self) -> str:
        return super().__repr__().replace("DefaultSampler(", "LengthGroupedSampler(", 1)[:-1] + \
            f", group={self.group})"
