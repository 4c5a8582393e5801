#pragma once
// RoPE's base, apart from kernels/rope.hpp so that CUDA sources need not include Eigen for it:
// theta_i = base^(-2i / d) (Su et al. 2021, eq. 15; 10000, Megatron-LM's --rotary-base default).

namespace meshwork::kernels {

inline constexpr double kRopeBase = 10000.0;

}  // namespace meshwork::kernels
