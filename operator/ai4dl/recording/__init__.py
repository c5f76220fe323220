"""`ai4dl record`: a process tree's CPU, memory and GPU use sampled from /proc and NVML into a trace."""
