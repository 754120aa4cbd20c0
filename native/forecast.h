// Predicted exits (issue 43, seed 003's Predictive Exit without its trained predictor): each
// sequence forecasts the exit block of its next decode step from the exits its recent steps showed,
// so that a step can be one graph (predicted) or stop once at the forecast (guarded) instead of
// every check_chunk blocks.
//
// Plan, as built:
// - The rule, no training: the forecast is an upper quantile (kq_num/kq_den) of the observed exits
//   of the sequence's last kWindow steps; with no history (after a prompt, a truncation) it is full
//   depth. A step observes the first block at or above tau among the backbone blocks it ran (its
//   checks come back with the logits); a step whose backbone ended at the forecast with no block at
//   tau left too early, and the exit it would have had is unknown (censored): it is recorded as full
//   depth, so a miss makes the next forecasts deeper, never earlier.
// - predicted: backbone 0..f and river f+1..L-1 and the head in one graph; f = L-1 is the
//   full-depth graph (bit-identical logits). A forecast that is too early costs fidelity; the
//   quantile bounds how often (measured: the hit and miss rates, docs/river.md).
// - guarded, the bound on a too-early forecast: the first graph ends at f with the checks of blocks
//   min..f (one sync instead of one per check_chunk blocks). A block at tau among them: the token
//   leaves at f (no earlier than the checked path would; the blocks to f are not computed twice);
//   none: the checked path's segments go on from f + 1 and the token leaves where checked leaves.
//   So no token leaves before its first block at tau: fidelity at least the checked path's, per
//   decision, at two graphs a step when the forecast is at or past the exit.
// - Batches: a lane per forecast block (slots whose forecasts agree run together, in one graph).
//   split: each sequence at its own forecast; minimum and all: the step leaves at the deepest
//   forecast (both rules leave only where every sequence is forecast to have reached tau).
#pragma once

#include <vector>

namespace pr {

// How a decode step finds its exit block (pr_exit_params.exit_rule).
enum class exit_mode { checked = 0, predicted = 1, guarded = 2 };

struct exit_forecast {
    static constexpr int kWindow = 8;             // steps remembered
    static constexpr int kq_num = 3, kq_den = 4;  // the quantile taken (upper: 0.75)
    std::vector<int> hist;                        // observed exits, oldest first

    // The forecast exit block in [lo, L-1] (L-1: full depth).
    int next(int lo, int L) const;
    // What a step showed: the first block at or above tau (L-1: none, at full depth; -1: none, the
    // backbone ended before L-1, recorded as L-1).
    void observe(int block, int L);
    void reset() { hist.clear(); }
};

// The first block of [cf, cf + nc) whose similarity sims[k] reaches tau; -1 when none.
int first_at_tau(const std::vector<float> & sims, int cf, int nc, float tau);

} // namespace pr
