//! Calibration profiles written by `gpuplan calibrate` (see `calibrate`).
