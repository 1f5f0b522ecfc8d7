# Sweep the learning rate of the digits MLP: a grid of 6 values, 300 iterations each (about 40
# seconds on 2 CPU cores). Each trial is a tools/train.py run in
# work_dirs/sweeps/digits_lr/trial_N; the study (study.db) lets a stopped sweep resume.
#   python tools/sweep.py configs/sweeps/digits_lr.py [--parallel 2]
config = "../digits_mlp.py"  # relative to this file, else to the current folder
metric = dict(key="val/accuracy", mode="max")  # the value at the last validation
strategy = "grid"  # or "random" / "bayes" (TPE) with trials=N and ranges such as
# "optim_wrapper.optimizer.lr": dict(type="float", low=1e-4, high=3e-2, log=True)
params = {
    "optim_wrapper.optimizer.lr": dict(choices=[1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2]),
}
# the same for every trial: a short run (the shipped schedule follows its length: a warm-up of
# 30 iterations, 10% of the run, then cosine decay to the end)
cfg_options = [
    "train_cfg.max_iters=300",
    "train_cfg.val_interval=50",
]
# once 3 trials have finished, a trial whose accuracy trails their median at the same
# iteration stops early (from iteration 150 on)
pruner = dict(type="MedianPruner", n_startup_trials=3, n_warmup_steps=150)
