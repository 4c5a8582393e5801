#pragma once
// Rotary position embedding (Su et al. 2021, "RoFormer", §3.4.2 eq. 34): each head's vector at
// position p is rotated pair by pair, dimension i with its partner, by the angle p * theta_i,
// theta_i = base^(-2i / d) (eq. 15; base 10000, Megatron-LM's --rotary-base default). The pairs
// are Megatron-LM's default, non-interleaved layout (rotate_half: dimension i with i + d/2,
// --rotary-interleaved off), over the whole head (--rotary-percent 1.0).

#include <span>

#include "kernels/rope_base.hpp"
#include "kernels/tensor.hpp"

namespace meshwork::kernels {

// x: [rows, heads * head_dim], row r holding the token at position r mod seq (samples of seq
// tokens, one after the other). Rotated in place; `inverse` rotates back by the opposite
// angle, which is also the gradient's map (a rotation's transpose is its inverse).
template <class T>
void rope_apply(Mat<T>& x, Index heads, Index head_dim, Index seq, bool inverse = false, double base = kRopeBase);
// The same with the positions given: row r holds the token at position
// positions[r mod positions.size()] (a context-parallel member's share of each sequence).
template <class T>
void rope_apply(Mat<T>& x, Index heads, Index head_dim, std::span<const Index> positions, bool inverse = false, double base = kRopeBase);

}  // namespace meshwork::kernels
