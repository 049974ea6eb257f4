"""Number formats and what they do to values: FP8 and 4-bit formats, recipes, quantizers, scaled GEMM entry points
per torch release, the FP8 linear layer and communication, accuracy against a high-precision reference, and the
accuracy a recipe predicts before anything runs.
"""
