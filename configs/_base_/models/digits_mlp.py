# A small MLP for the 8x8 handwritten digits (64 inputs, 10 classes).
model = dict(type="DigitsMLP", in_features=64, hidden=256, num_classes=10, dropout=0.1)
