// GEMM family: one kernel template per tensor-core path, instantiated per op x dtype x variant by
// the generated gemm_entries.cu (AK_ENTRY_<PATH>(symbol, op, T, V), V the variant's config
// struct). The build plan only emits an instantiation inside `#if` guards of the targets that
// have its features, so each path's code appears only in the images that can run it.
#pragma once

#include "epilogue.cuh"
#include "mma_sync.cuh"

// The arch-specific paths are only included in the device pass that instantiates them: the CuTe
// headers they use cost seconds per pass, and other passes have nothing to take from them.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "wgmma.cuh"
#endif
#if defined(__CUDA_ARCH_FEAT_SM100_ALL)
#include "tcgen05.cuh"
#endif
