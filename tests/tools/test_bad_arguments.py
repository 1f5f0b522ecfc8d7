"""Bad arguments to the tools beyond train/test (the text, Hugging Face, generation, parallel and
analysis surfaces): for each, a missing file, a wrong kind of value and a misspelled choice end
with a status != 0 and one error line naming the problem, no traceback, before any work.

The tools run in this process through the `libai` dispatcher (`libai <command> ...` is what
`python tools/<tool>.py ...` runs), so the whole table costs seconds.
"""

import pytest

from libai.cli import main

CASES = {
    # command: {kind: (arguments, what the error line says)}; $T is the test's folder
    "preprocess-text": {
        "missing": ("$T/nope.txt --output-prefix $T/o --train-tokenizer wordpiece --vocab-size 100",
                    "Input file $T/nope.txt not found"),
        "kind": ("$T/notes.txt --output-prefix $T/o --train-tokenizer wordpiece --vocab-size big",
                 "argument --vocab-size: invalid int value: 'big'"),
        "kind2": ("$T/notes.txt --output-prefix $T/o --train-tokenizer wordpiece --vocab-size 100 "
                  "--workers -2", "--workers must be 0 or 1 (tokenise in this process) or more, got -2"),
        "choice": ("$T/notes.txt --output-prefix $T/o --train-tokenizer wordpeice",
                   "argument --train-tokenizer: invalid choice: 'wordpeice'"),
    },
    "convert": {
        "missing": ("hf2libai $T/nohf $T/o.pth", "'$T/nohf' is not a Hugging Face model folder"),
        "kind": ("file2sharded $T/notes.txt $T/o", "'$T/notes.txt' is not a PyTorch checkpoint"),
        "choice": ("hf2liabi $T/nohf $T/o.pth", "invalid choice: 'hf2liabi'"),
    },
    "generate": {
        "missing": ("gpt2_tiny $T/nope.pth", "Checkpoint '$T/nope.pth' does not exist"),
        "kind": ("gpt2_tiny $T/nope.pth --top-p 2", "--top-p is a total probability in (0, 1]"),
        "kind2": ("gpt2_tiny $T/nope.pth --temperature -1",
                  "--temperature must be a finite number >= 0 (0 always takes the likeliest"),
        "choice": ("gpt2_tyni $T/nope.pth", "Did you mean 'gpt2_tiny'?"),
    },
    "predict": {
        "missing": ("bert_tiny_genre $T/nope.pth hi", "Checkpoint '$T/nope.pth' does not exist"),
        "missing2": ("bert_tiny_genre $T/nope.pth --file $T/nope.csv", "--file $T/nope.csv: no such "
                                                                       "file"),
        "kind": ("bert_tiny_genre $T/nope.pth hi --top-k 0", "--top-k must be at least 1, got 0"),
        "choice": ("bert_tiny_genr $T/nope.pth hi", "Did you mean 'bert_tiny_genre'"),
    },
    "analyze-logs": {
        "missing": ("summary $T/nope", "$T/nope: no such file or directory"),
        "kind": ("summary $T/notes.txt", "none of its 1 line(s) is a JSON row with a 'step'"),
        "choice": ("plot_curve $T --x epoc --out $T/a.png", "argument --x: invalid choice: 'epoc'"),
    },
    "summary": {
        "missing": ("$T/nope.py", "config file '$T/nope.py' not found"),
        "kind": ("digits_mlp --depth -1", "--depth must be >= 1, got -1"),
        "choice": ("digits_mlpp", "Did you mean 'digits_mlp'?"),
    },
    "lr-find": {
        "missing": ("$T/nope.py", "config file '$T/nope.py' not found"),
        "kind": ("digits_mlp --num-iters many", "argument --num-iters: invalid int value: 'many'"),
        "choice": ("digits_mlpp", "Did you mean 'digits_mlp'?"),
    },
    "sweep": {
        "missing": ("$T/nope.py --study-dir $T/study", "config file '$T/nope.py' not found"),
        "kind": ("$T/sweep.py --study-dir $T/study --trials lots",
                 "argument --trials: invalid int value: 'lots'"),
        "choice": ("$T/sweep_typo.py --study-dir $T/study", "strategy must be one of grid, random, "
                                                            "bayes, got 'gird'. Did you mean 'grid'?"),
        "kind2": ("$T/sweep.py --study-dir $T/study --trials 0", "--trials must be an int >= 1, got 0"),
        "choice2": ("sweeps/digits_rl --study-dir $T/study", "Did you mean 'sweeps/digits_lr'"),
    },
    "train": {  # the parallel surface
        "kind": ("digits_mlp --fast-dev-run --cfg-options parallel.fsdp=two",
                 "parallel.fsdp='two': expected a whole number >= 1"),
        "kind2": ("digits_mlp --fast-dev-run --cfg-options +parallel.cpu_offload=True",
                  "parallel.cpu_offload=True is an FSDP option: set parallel.fsdp too"),
        "choice": ("digits_mlp --fast-dev-run --cfg-options parallel.fdsp=2",
                   "Did you mean 'fsdp'"),
    },
}
SWEEP = ('config = "libai::digits_mlp.py"\nmetric = dict(key="val/accuracy", mode="max")\n'
         'strategy = "{strategy}"\nparams = {{"optim_wrapper.optimizer.lr": dict(choices=[1e-3])}}\n')


@pytest.mark.parametrize("command, kind", [(c, k) for c, kinds in CASES.items() for k in kinds])
def test_bad_argument_is_one_line(command, kind, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # nothing a tool might write lands in the checkout
    (tmp_path / "notes.txt").write_text("hello world\n")
    (tmp_path / "sweep.py").write_text(SWEEP.format(strategy="grid"))
    (tmp_path / "sweep_typo.py").write_text(SWEEP.format(strategy="gird"))
    args, expected = (s.replace("$T", str(tmp_path)) for s in CASES[command][kind])
    with pytest.raises(SystemExit) as exc:
        main([command, *args.split()])
    out = capsys.readouterr()
    assert exc.value.code not in (0, None), out.out[-2000:]
    assert "Traceback" not in out.err
    errors = [line for line in out.err.splitlines() if "error:" in line]
    assert len(errors) == 1, out.err
    assert expected in errors[0], out.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "sweep.py", "sweep_typo.py"]
