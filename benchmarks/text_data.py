"""Text data: loader throughput against the training step it feeds, and memory against corpus size.

1. **Throughput.** ``BertPretrainingDataset`` and ``GPTDataset`` with the data settings of
   ``configs/bert_base.py`` and ``configs/gpt2_tiny.py`` (built-in Shakespeare; the first use
   builds the corpus into the cache), read through ``build_dataloader`` with 0 and 2 worker
   processes: samples/s over ``--batches`` batches after a warm-up batch. Against it, in the same
   run, the time of one ``bert_base`` training step (BERT-base, batch 32 x 128 tokens, forward +
   backward + AdamW, the median of ``--step-repeats`` after a warm-up step): the printed share is
   how much of that step the loader needs per batch when it runs in the training process.
2. **Memory.** Corpora of growing size (``--sizes-mb`` of random token ids, written with
   ``IndexedTokenWriter``), then one of ``--sparse-factor`` times this machine's RAM, each opened
   by ``GPTDataset`` in a fresh process that reads ``--reads`` random samples. The big one is a
   sparse file: its token file holds only zeros and takes no disk space, but the reader maps and
   pages it exactly as real text (it does not know the difference); loading it whole is impossible
   here. Printed per corpus: its size, the resident memory after opening and after reading,
   anonymous (the process's own) and file-backed (pages of the corpus, which the kernel drops under
   pressure). A memory-mapped corpus keeps the anonymous part flat as the corpus grows. (The
   time per sample of the sparse corpus is that of faulting in holes of a sparse file, several
   ms per page on this VM's filesystem: it says nothing about real corpora.)

    python benchmarks/text_data.py [--batches 50] [--step-repeats 3] [--sizes-mb 64 256 1024]
        [--sparse-factor 10] [--reads 2000] [--skip-step] [--skip-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SEQ = 128


def _data_cfg(config: str) -> dict:
    from libai.config import Config

    return Config.fromfile(str(ROOT / "configs" / config)).train_dataloader.to_dict()


def loader_throughput(config: str, num_workers: int, batches: int) -> tuple[float, float]:
    """(samples/s, seconds per batch) of the config's training loader."""
    from libai.data import build_dataloader

    cfg = dict(_data_cfg(config), num_workers=num_workers)
    loader = build_dataloader(cfg, seed=0)
    it = iter(loader)
    next(it)  # workers started, first batch out
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    per_batch = (time.perf_counter() - t) / batches
    return cfg["batch_size"] / per_batch, per_batch


def bert_base_step(repeats: int) -> float:
    """Median seconds of one bert_base training step on the config's own batch."""
    from libai.config import Config
    from libai.data import build_dataloader
    from libai.registry import MODELS

    cfg = Config.fromfile(str(ROOT / "configs" / "bert_base.py"))
    torch.manual_seed(0)
    model = MODELS.build(cfg.model.to_dict()).train()
    batch = next(iter(build_dataloader(cfg.train_dataloader.to_dict(), seed=0)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        out = model(batch)
        sum(v for k, v in out.items() if "loss" in k).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


# --------------------------------------------------------------------------------- memory
def _tokenizer():
    """A small BPE tokenizer: the corpora hold random ids below its vocabulary size."""
    from libai.data.text import TextTokenizer

    words = [f"w{i} x{i % 97} y{i % 13}" for i in range(3000)]
    return TextTokenizer.train(words, "bpe", vocab_size=1024)


def write_random_corpus(prefix: Path, size_mb: int, vocab_size: int) -> None:
    """``size_mb`` MiB of uint16 token ids in documents of ~2,000 tokens (sentences of 50)."""
    from libai.data.text import IndexedTokenWriter

    rng = np.random.default_rng(0)
    total = size_mb * (1 << 20) // 2
    with IndexedTokenWriter(prefix, vocab_size) as w:
        while w.num_tokens < total:
            doc = rng.integers(0, vocab_size, size=2000, dtype=np.int64)
            w.add_document(np.split(doc, 40))


def write_sparse_corpus(prefix: Path, size_bytes: int, vocab_size: int) -> None:
    """A valid corpus whose token file is one sparse hole of ``size_bytes`` (all token 0).

    Uses the index layout of ``libai/data/text/indexed.py`` directly: writing that many real
    tokens would need the disk space this benchmark shows is not needed in memory.
    """
    from libai.data.text import indexed

    doc_tokens = 1 << 20  # one sentence of 1 Mi tokens per document
    num_tokens = size_bytes // 2 // doc_tokens * doc_tokens
    docs = num_tokens // doc_tokens
    bin_path, idx_path = indexed.index_paths(prefix)
    with open(bin_path, "wb") as f:
        f.truncate(num_tokens * 2)  # uint16 zeros, no block allocated
    offsets = np.arange(docs + 1, dtype=np.int64)
    header = indexed._HEADER.pack(
        indexed._MAGIC, indexed._VERSION, 2, vocab_size, num_tokens, docs, docs, num_tokens * 2,
        indexed._fingerprint(bin_path, num_tokens * 2),
    )
    with open(idx_path, "wb") as f:
        f.write(header + (offsets * doc_tokens).tobytes() + offsets.tobytes())


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) // 1024  # MiB
    return out


def read_corpus(prefix: str, tokenizer_path: str, reads: int) -> dict:
    """In a fresh process: open ``prefix`` with GPTDataset, read ``reads`` random samples."""
    from libai.data import SampleKey
    from libai.data.text import GPTDataset, IndexedTokenDataset, TextCorpus, TextTokenizer

    before = _status()
    corpus = TextCorpus(IndexedTokenDataset(prefix), TextTokenizer.load(tokenizer_path))
    dataset = GPTDataset(corpus, split="all", seq_length=SEQ)
    opened = _status()
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    checksum = 0
    for i in rng.integers(0, len(dataset), size=reads):
        checksum += int(dataset[SampleKey(int(i), int(i), 0)]["input_ids"][0])
    per_read = (time.perf_counter() - t) / reads
    after = _status()
    return dict(tokens=corpus.tokens.num_tokens, before=before, opened=opened, after=after,
                us_per_read=per_read * 1e6, checksum=checksum)


def memory_rows(sizes_mb: list[int], sparse_factor: float, reads: int) -> tuple[list, int]:
    """One row per corpus: (label, bytes, seconds to write, what :func:`read_corpus` saw);
    and this machine's RAM in bytes."""
    rows = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        folder = Path(tmp)
        tok = _tokenizer()
        tok_path = str(tok.save(folder / "tokenizer.json"))
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        corpora = [(f"{mb} MiB", mb << 20, False) for mb in sizes_mb]
        if sparse_factor > 0:
            corpora.append((f"{sparse_factor:g} x RAM (sparse)", int(ram * sparse_factor), True))
        for label, size, sparse in corpora:
            prefix = folder / f"corpus_{size}"
            t = time.perf_counter()
            if sparse:
                write_sparse_corpus(prefix, size, tok.vocab_size)
            else:
                write_random_corpus(prefix, size >> 20, tok.vocab_size)
            written = time.perf_counter() - t
            code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); "
                    f"import text_data; print(json.dumps(text_data.read_corpus("
                    f"{str(prefix)!r}, {tok_path!r}, {reads})))")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True)
            rows.append((label, size, written, json.loads(out.stdout.strip().splitlines()[-1])))
            for p in prefix.parent.glob(prefix.name + ".*"):
                p.unlink()
    return rows, ram


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--step-repeats", type=int, default=3)
    parser.add_argument("--sizes-mb", type=int, nargs="*", default=[64, 256, 1024])
    parser.add_argument("--sparse-factor", type=float, default=10.0)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--skip-step", action="store_true", help="no bert_base step timing")
    parser.add_argument("--skip-memory", action="store_true", help="no memory part")
    args = parser.parse_args(argv)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores")
    step = None if args.skip_step else bert_base_step(args.step_repeats)
    if step is not None:
        print(f"bert_base training step (batch 32 x 128 tokens): {step:.2f} s")
    print(f"{'loader':<34}{'workers':>8}{'samples/s':>11}{'ms/batch':>10}{'share of step':>15}")
    for config in ("bert_base.py", "gpt2_tiny.py"):
        for workers in (0, 2):
            rate, per_batch = loader_throughput(config, workers, args.batches)
            share = f"{per_batch / step:.2%}" if step else "-"
            name = config.removesuffix(".py") + " train_dataloader"
            print(f"{name:<34}{workers:>8}{rate:>11.0f}{per_batch * 1e3:>10.2f}{share:>15}")
    if args.skip_memory:
        return
    rows, ram = memory_rows(args.sizes_mb, args.sparse_factor, args.reads)
    print(f"\nmemory while reading {args.reads} random GPT samples of {SEQ} tokens "
          f"(RAM {ram / 2**30:.1f} GiB; MiB, fresh process each):")
    print(f"{'corpus':<24}{'GiB':>9}{'written s':>10}{'anon open':>11}{'anon read':>11}"
          f"{'file read':>11}{'us/sample':>11}")
    for label, size, written, r in rows:
        print(f"{label:<24}{size / 2**30:>9.2f}{written:>10.1f}{r['opened']['RssAnon']:>11}"
              f"{r['after']['RssAnon']:>11}{r['after']['RssFile']:>11}{r['us_per_read']:>11.0f}")


if __name__ == "__main__":
    main()
