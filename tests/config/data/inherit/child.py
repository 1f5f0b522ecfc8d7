# Level 2 (Python): references a value merged from two levels down.
_base_ = "mid.py"

import math  # noqa: E402  (modules are dropped from the config)

model = dict(out_features=_base_.model.hidden // 2)
optim_wrapper = dict(optimizer=dict(lr=0.01))
warmup = math.floor(_base_.train_cfg.max_iters / 10)
