// A step's metadata as the kernels read it from device memory. The buffers sit at fixed addresses
// for the backend's lifetime (until they must grow), so a captured graph replays against whatever
// set_step() copied in last.
#pragma once

#include <cstdint>

namespace cera::cuda {

struct DeviceSeq {
  int32_t first_token;   // first batch row
  int32_t n_tokens;
  int32_t n_past;        // KV entries (and conv inputs) before this step
  int32_t conv_slot;     // -1: none
  int32_t block_offset;  // where its KV block table starts in StepView::block_tables
};

// Tokens of one sequence per prefill attention tile (the kernel shares each K/V tile among them).
inline constexpr int32_t kAttentionTileTokens = 32;

// A tile of the prefill attention kernel: up to `n_tokens` consecutive tokens of one sequence.
struct AttentionTile {
  int32_t seq;
  int32_t first_local;  // index of the tile's first token within the sequence's step tokens
  int32_t n_tokens;
};

struct StepView {
  const int32_t* tokens;       // [T]
  const int32_t* positions;    // [T]
  const int32_t* token_seq;    // [T] index into seqs
  const DeviceSeq* seqs;       // [n_seqs]
  const int32_t* block_tables;
  const int32_t* output_rows;  // [n_out]
  const AttentionTile* tiles;  // [n_tiles]
  // 1: token t is sequence t's only token (a decode step as the engine builds it), so a kernel may
  // take seqs[t] without first loading token_seq[t]: one dependent load fewer where it is on the
  // critical path (the fused decode attention's preamble, in blocks that start after their wait).
  int32_t tokens_are_seqs;
};

}  // namespace cera::cuda
