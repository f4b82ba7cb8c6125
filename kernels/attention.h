// Causal multi-head self-attention (the part between the QKV projection and
// the output projection), forward and backward.
//
// Each (batch, head) pair is a few GEMMs over blocks of kAttentionBlock
// query rows, so the strictly-upper (masked) part of the T x T score matrix
// is computed only inside the diagonal blocks.
#ifndef STRATA_KERNELS_ATTENTION_H_
#define STRATA_KERNELS_ATTENTION_H_

namespace strata::kernels {

// Row block of the blocked causal GEMMs.
inline constexpr int kAttentionBlock = 64;

// out[b,t,h*hs:(h+1)*hs] = sum_{t2<=t} att[b,h,t,t2] * v[b,t2,h]
// where att = softmax over t2 <= t of q[b,t,h] . k[b,t2,h] / sqrt(hs).
// qkv is (B,T,3C): q, k, v of token (b,t) side by side, head h in columns
// [h*hs, (h+1)*hs) of each. out is (B,T,C). att is (B,NH,T,T): the
// probabilities, saved for backward (entries above the diagonal are 0).
// REQUIRES: C % NH == 0.
void AttentionForward(float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH);

// Backward of AttentionForward: dqkv = dL/dqkv (overwritten).
// dqkv and qkv are (B,T,3C), dout is (B,T,C), att is (B,NH,T,T) from the
// forward pass, scratch is (B,NH,T,T) of any content.
void AttentionBackward(float* dqkv, float* scratch, const float* dout,
                       const float* qkv, const float* att, int B, int T, int C,
                       int NH);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_H_
