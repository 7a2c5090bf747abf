// The memory roof: how fast these threads can read DRAM. Decode at batch 1 reads every
// weight once per token, so it is judged against this (moetier bench's roofline line,
// kernels_bench's read_bandwidth).
//
// One sequential stream of 8-byte loads per thread under-measures on server cores: on a
// Sapphire Rapids VM, 2 threads read 16.6 GB/s that way, 29-30 GB/s with four streams and
// software prefetch (as much as 64-byte AVX-512 loads), while the decode kernels reached
// 22-24 GB/s. So each thread reads four streams a quarter of its range apart, prefetching
// ahead, the way a matmul reads several weight rows at once.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace mt {

// Reads [data, data + bytes) once; returns a value that depends on every 8-byte word, so the
// reads cannot be optimised away. data must be 64-byte aligned.
uint64_t ReadAllBytes(const void* data, uint64_t bytes);

// Reads `bytes` of freshly allocated and touched memory with all threads of `pool`, `reps`
// times; returns the best GB/s (1e9 bytes/s), or 0 if the buffer cannot be allocated.
double MeasureReadBandwidth(ThreadPool& pool, uint64_t bytes, int reps);

}  // namespace mt
