# Level 1 (Python): a YAML and a JSON base; the later base wins where both set a key.
_base_ = ["model.yaml", "schedule.json"]

model = dict(hidden=128, norm=dict(_delete_=True, type="LayerNorm"))
train_cfg = dict(max_iters=_base_.train_cfg.max_iters * 2)
