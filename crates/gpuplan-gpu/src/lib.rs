//! gpuplan-gpu: the hardware side. `calibrate` runs microbenchmarks (NVRTC kernels, cuBLASLt,
//! NCCL, NVML) and writes a profile; `measure` wraps a real job, samples NVML and writes a run
//! record. CUDA and NVML are loaded at run time, so the binary runs on a machine without them.

pub mod calibrate;
pub mod measure;
