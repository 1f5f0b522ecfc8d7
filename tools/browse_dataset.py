"""Look at a config's data before training: sample items of one split, then plot them.

    python tools/browse_dataset.py CONFIG [--split train|val|test] [-n 16] [--out FILE]
        [--set NAME] [--seed S] [--cfg-options key=value ...] [--debug]

The split's data loader is built from the config as the runner builds it (dataset, transforms,
sampler; no model, no optimizer), and the first N keys its sampler yields in epoch 0 (on one
process: what training would read first) are loaded from its dataset, after the transforms.
The sampler's key is what the dataset takes: a plain index, or a ``SampleKey`` with
``seed_per_sample=True`` (the text configs), which fixes the masks and pairs of a sample.
Random transforms that draw from the global RNGs are seeded with ``--seed`` (default: the
config's ``randomness.seed``, else 0).

What is drawn depends on the items:

- Images: an item whose ``inputs`` tensor is 2-D (H, W), 3-D ((C, H, W) or (H, W, C) with 1,
  3 or 4 channels) or a flat vector. The image shape is found in this order: the tensor's own
  shape when it is 2-D or 3-D; ``dataset.metainfo["image_shape"]`` for a flat vector
  (``DigitsDataset`` says (8, 8): its 64 pixels are flattened row by row); else a square when
  the length is a perfect square. The grid is written as a PNG, each image titled with its
  label (the class name from ``metainfo["classes"]`` when there is one) and dataset index.
- Text: an item with ``input_ids``. The tokens are decoded with the dataset's tokenizer (the
  text datasets expose it as ``dataset.corpus.tokenizer``; a ``tokenizer`` attribute or the
  file named by ``metainfo["tokenizer"]`` also serve). An HTML table gets one row per sample:
  for BERT samples the text with each predicted position marked ``<mark>[MASK]→original</mark>``
  (from ``mlm_positions``/``mlm_labels``; a token replaced at random or kept shows
  ``token→original``) and the next-sentence label; for GPT samples the input and the labels it
  is trained to predict (the input shifted by one token). A short plain-text version is
  printed to the console.

The output goes to ``--out`` or ``browse_<config stem>_<split>.png|.html`` in the current folder.

The same as ``libai browse ...``; from Python, :func:`libai.analysis.browse.browse`.
"""

from libai.analysis.browse import *  # noqa: F403  (the Python API, importable from here as before)
from libai.analysis.browse import browse, load_config, sample_split  # noqa: F401
from libai.cli.browse_dataset import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
