#include "forecast.h"

#include <algorithm>

namespace pr {

int exit_forecast::next(int lo, int L) const {
    if (hist.empty()) return L - 1;   // nothing seen yet: full depth, which also observes the exit
    std::vector<int> s(hist);
    std::sort(s.begin(), s.end());
    // Upper quantile: the smallest value with at least kq_num/kq_den of the window at or below it.
    const size_t n = s.size(), i = (n * kq_num + kq_den - 1) / kq_den;
    return std::min(L - 1, std::max(lo, s[std::max<size_t>(i, 1) - 1]));
}

void exit_forecast::observe(int block, int L) {
    hist.push_back(block < 0 ? L - 1 : std::min(block, L - 1));
    if ((int) hist.size() > kWindow) hist.erase(hist.begin());
}

int first_at_tau(const std::vector<float> & sims, int cf, int nc, float tau) {
    for (int k = 0; k < nc; k++) if (sims[(size_t) k] >= tau) return cf + k;
    return -1;
}

} // namespace pr
