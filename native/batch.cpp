// Steps over several sequences (pr_decode_batch): validation before any graph, grouping by
// sequence, and the exit rules of a batch. Tokens that leave the backbone run the river in a lane
// of their own beside those that stay, in the same graphs (graph.h).
#include "context.h"

#include <algorithm>
#include <map>

namespace pr {

namespace {

// One sequence's tokens in the step.
struct step_group {
    int seq = 0;
    std::vector<int> idx;          // batch indices of its tokens, in position order
    bool exits = false;            // may leave the backbone: a decode step (or a prompt under prefill_exit)
    bool river = false;            // has left it
    bool verify = false;           // every token PR_VERIFY: a verify step's (graph_shape's verify_tile_rows)
    int forecast = -1;             // predicted, guarded: the forecast exit block of a decode step
    int seen = -1;                 // ... and the first block at tau it ran (pr_exit_observed)
    int at = 0;                    // the next block it runs
    int exit_block = -1;           // the block it left the backbone after (L-1: none)
    int first_pass = -1;           // all_may_exit: the first block whose similarity reached tau
    std::vector<float> h;          // hidden state before block `at`, n_embd floats a token
};

// Checks everything about a batch that could make ggml abort or the cache disagree with the
// caller, before any graph is built.
void validate(const context & c, const std::vector<batch_token> & b) {
    const int n = (int) b.size();
    if (n < 1) fail(PR_ERR_INVALID_ARG, "a batch needs at least one token");
    if (n > c.params.n_batch) fail(PR_ERR_INVALID_ARG, "a batch of %d tokens exceeds n_batch %d", n, c.params.n_batch);
    std::map<int, int> count;
    for (int i = 0; i < n; i++) {
        const batch_token & t = b[i];
        check_tokens(*c.m, &t.token, 1);
        if (t.seq < 0 || t.seq >= c.kv->n_seq) {
            fail(PR_ERR_INVALID_ARG, "token %d: sequence id %d is not in [0, n_seq_max %d)", i, t.seq, c.kv->n_seq);
        }
        const int want = c.used(t.seq) + count[t.seq]++;
        if (t.pos != want) {
            fail(PR_ERR_INVALID_ARG, "token %d: position %d of sequence %d must be %d (the next free one; %d are cached)",
                 i, t.pos, t.seq, want, c.used(t.seq));
        }
    }
    for (const auto & sc : count) {
        if ((int64_t) c.used(sc.first) + sc.second > c.params.n_ctx) {
            fail(PR_ERR_CONTEXT_FULL, "%d tokens of sequence %d do not fit: %d of n_ctx %d are in use", sc.second,
                 sc.first, c.used(sc.first), c.params.n_ctx);
        }
    }
}

// The rows of the groups gs (in that order) of a lane tensor [n_embd, T], each group's into its h.
void scatter_rows(const std::vector<float> & t, size_t E, std::vector<step_group> & all, const std::vector<int> & gs,
                  const std::vector<int> & take) {
    size_t row = 0;
    for (int gi : gs) {
        step_group & g = all[gi];
        const size_t n = g.idx.size();
        if (std::find(take.begin(), take.end(), gi) != take.end()) g.h.assign(t.begin() + row * E, t.begin() + (row + n) * E);
        row += n;
    }
}

} // namespace

// Which backbone groups leave after this segment, and where: cg[k][j] is the similarity of checked
// block cf + k for group j (the minimum over its tokens). Returns the exit block of each (-1: stays).
static std::vector<int> decide(const exit_rule & rule, std::vector<step_group *> & gs, const std::vector<std::vector<float>> & cg,
                               int cf, int nc) {
    std::vector<int> out(gs.size(), -1);
    auto first_at = [&](size_t j) {
        for (int k = 0; k < nc; k++) if (cg[k][j] >= rule.tau) return cf + k;
        return -1;
    };
    if (rule.batch == batch_rule::split) {
        for (size_t j = 0; j < gs.size(); j++) out[j] = first_at(j);
    } else if (rule.batch == batch_rule::minimum) {
        for (int k = 0; k < nc; k++) {
            float mn = 2.0f;
            for (size_t j = 0; j < gs.size(); j++) mn = std::min(mn, cg[k][j]);
            if (mn >= rule.tau) {
                std::fill(out.begin(), out.end(), cf + k);
                break;
            }
        }
    } else {   // all_may_exit: every group keeps the backbone until the last of them may leave
        int last = -1;
        for (size_t j = 0; j < gs.size(); j++) {
            if (gs[j]->first_pass < 0) gs[j]->first_pass = first_at(j);
            if (gs[j]->first_pass < 0) return out;
            last = std::max(last, gs[j]->first_pass);
        }
        std::fill(out.begin(), out.end(), last);
    }
    return out;
}

// One graph of a step: a lane per (backbone or river, first block) with its groups, their inputs,
// and the batch output row of each logits row (when the graph ends at the head).
struct step_plan {
    segment seg;
    std::vector<context::lane_feed> feeds;
    std::vector<std::vector<int>> lane_groups;
    std::vector<std::vector<int32_t>> toks;
    std::vector<std::vector<float>> hid;
    std::vector<int> graph_out;
};

// The groups' tokens into a lane and its feed (the lane's last token vector in p.toks); with_logits:
// the tokens that want logits become the lane's output rows, in batch output order.
static void fill_lane(const context & c, const std::vector<step_group> & groups, const std::vector<batch_token> & b,
                      const std::vector<int> & out_row, const std::vector<int> & gis, bool with_logits, step_plan & p,
                      lane & ln, context::lane_feed & f) {
    int row = 0;
    for (int gi : gis) {
        const step_group & g = groups[gi];
        ln.groups.push_back(c.group_of(g.seq, (int) g.idx.size()));
        ln.groups.back().verify = g.verify;
        for (int i : g.idx) {
            p.toks.back().push_back(b[i].token);
            if (with_logits && b[i].logits) {
                f.out_ids.push_back(row);
                p.graph_out.push_back(out_row[i]);
            }
            row++;
        }
    }
    ln.n_outputs = (int) f.out_ids.size();
    // Under flash attention the one-token groups attend over one n_kv, the longest, as llama.cpp's
    // streams do, so that attention_runs joins them into one product (no per-sequence split of the
    // cache rows across threads, no concatenation); the rows past a sequence's own are masked.
    if (!c.kv->v_trans) {
        int n_kv = 0;
        for (const seq_group & g : ln.groups) if (g.n_tokens == 1) n_kv = std::max(n_kv, g.n_kv);
        for (seq_group & g : ln.groups) if (g.n_tokens == 1) g.n_kv = n_kv;
    }
}

// A head graph's logits rows, every output row of the step, queued in one copy into the output
// buffer in the graph's order (as llama.cpp's decode reads a ubatch's rows).
static void queue_rows(const context & c, const built_graph & gr, const step_plan & p) {
    if (p.graph_out.size() != (size_t) c.n_outputs || (gr.logits && ggml_nelements(gr.logits) != (int64_t) (p.graph_out.size() * c.m->hp.n_vocab))) {
        fail(PR_ERR_INTERNAL, "a head graph without every output row");
    }
    if (!p.graph_out.empty()) c.fetch(gr.logits, c.out, 0, ggml_nbytes(gr.logits));
}

// Once they have landed: each row to its batch output row, swapped in place on the host (llama.cpp's
// output_swaps), where the lanes put the sequences in another order than the batch.
static void order_rows(const context & c, const step_plan & p, size_t nv) {
    std::vector<int> at = p.graph_out;   // at[r]: the batch row that graph row r belongs to
    for (size_t r = 0; r < at.size(); r++) {
        while (at[r] != (int) r) {
            const int d = at[r];
            if (d < 0 || (size_t) d >= at.size() || at[d] == d) fail(PR_ERR_INTERNAL, "output rows are not a permutation");
            std::swap_ranges(c.out + r * nv, c.out + (r + 1) * nv, c.out + (size_t) d * nv);
            std::swap(at[r], at[d]);
        }
    }
}

static void take_rows(const context & c, const built_graph & gr, const step_plan & p, size_t nv) {
    queue_rows(c, gr, p);
    c.settle();
    order_rows(c, p, nv);
}

static void plan_step(const context & c, const std::vector<step_group> & groups, const std::vector<batch_token> & b,
                      const std::vector<int> & out_row, int start, int end, step_plan & p) {
    const int L = c.m->hp.n_layer, lo = c.rule.min_layer, hi = L - 2;
    // Lanes: the backbone groups (all at `start`), then the river groups by the block they are at.
    std::map<std::pair<int, int>, std::vector<int>> by_lane;   // (river, at) -> groups
    for (size_t gi = 0; gi < groups.size(); gi++) by_lane[{groups[gi].river ? 1 : 0, groups[gi].at}].push_back((int) gi);
    p.seg = c.base_segment();
    p.toks.reserve(by_lane.size());   // the feeds point into these: no reallocation
    p.hid.reserve(by_lane.size());
    for (auto & bl : by_lane) {
        lane ln;
        ln.river = bl.first.first == 1;
        ln.first = bl.first.second;
        ln.last = end;
        if (!ln.river && c.rule.force_layer < 0) {
            ln.check_first = std::max(start, lo);
            ln.check_last = std::min(end, hi);
        }
        p.toks.emplace_back();
        p.hid.emplace_back();
        context::lane_feed f;
        fill_lane(c, groups, b, out_row, bl.second, end == L - 1, p, ln, f);
        for (int gi : bl.second) p.hid.back().insert(p.hid.back().end(), groups[gi].h.begin(), groups[gi].h.end());
        if (ln.first == 0) f.tokens = p.toks.back().data(); else f.hidden = &p.hid.back();
        p.seg.lanes.push_back(ln);
        p.feeds.push_back(f);
        p.lane_groups.push_back(bl.second);
    }
    p.seg.host_checks = c.rule.host_checks != 0 && c.on_cpu(start, end);
}

// The groups of the backbone lane (lane 0, when it is one) that leave it after this graph, and
// the block each leaves after: (group, block) pairs.
static std::vector<std::pair<int, int>> backbone_exits(const context & c, const built_graph & gr, const step_plan & p,
                                                       std::vector<step_group> & groups, int end) {
    std::vector<std::pair<int, int>> out;
    const lane & ln = p.seg.lanes[0];
    if (ln.river) return out;
    std::vector<step_group *> cand;
    std::vector<int> cand_gi;
    for (int gi : p.lane_groups[0]) if (groups[gi].exits) { cand.push_back(&groups[gi]); cand_gi.push_back(gi); }
    std::vector<int> k_of(cand.size(), -1);
    if (c.rule.force_layer >= 0) {
        std::fill(k_of.begin(), k_of.end(), end);
    } else if (!cand.empty() && ln.n_checks() > 0) {
        // The similarity of each checked block for each candidate group: the minimum over its tokens.
        const int nc = ln.n_checks();
        const std::vector<float> sim = lane_similarities(c, gr, 0);
        const size_t T = (size_t) ln.n_tokens();
        std::vector<std::vector<float>> cg(nc, std::vector<float>(cand.size(), 2.0f));
        size_t row = 0;
        for (int gi : p.lane_groups[0]) {
            const size_t n = groups[gi].idx.size();
            const auto it = std::find(cand_gi.begin(), cand_gi.end(), gi);
            for (int k = 0; it != cand_gi.end() && k < nc; k++) {
                float mn = 2.0f;
                for (size_t t = row; t < row + n; t++) mn = std::min(mn, sim[(size_t) k * T + t]);
                cg[k][it - cand_gi.begin()] = mn;
            }
            row += n;
        }
        k_of = decide(c.rule, cand, cg, ln.check_first, nc);
    }
    for (size_t j = 0; j < cand.size(); j++) if (k_of[j] >= 0) out.push_back({cand_gi[j], k_of[j]});
    return out;
}

// After a graph that did not reach the head: every group takes the hidden state it continues from
// (a group that left the backbone: its exit block's output) and the block it runs next.
static void move_on(const context & c, const built_graph & gr, const step_plan & p, const std::vector<std::pair<int, int>> & leaving,
                    std::vector<step_group> & groups, size_t E, int end) {
    for (size_t li = 0; li < p.seg.lanes.size(); li++) {
        const lane & ln = p.seg.lanes[li];
        const lane_io & io = gr.lanes[li];
        const std::vector<int> & gs = p.lane_groups[li];
        std::vector<int> stay;
        for (int gi : gs) {
            bool leaves = false;
            for (const auto & l : leaving) leaves = leaves || l.first == gi;
            if (!leaves) stay.push_back(gi);
        }
        scatter_rows(read_tensor(c, io.last_hidden), E, groups, gs, stay);
        for (int gi : stay) groups[gi].at = end + 1;
        if (li != 0 || ln.river) continue;
        for (const auto & l : leaving) {   // exit block k: the river continues from its output
            const int gi = l.first, k = l.second;
            const bool last_block = k == ln.last && ln.check_last < k;
            scatter_rows(read_tensor(c, last_block ? io.last_hidden : io.hidden_out[k - ln.check_first]), E, groups, gs, {gi});
            groups[gi].river = true;
            groups[gi].at = k + 1;
            groups[gi].exit_block = k;
        }
    }
}

// exit_rule predicted: the whole step in one graph, a lane per forecast block (the backbone to it,
// the river after it), so slots whose forecasts agree run together. split: each decode step at its
// own forecast; minimum and all: every decode step at the deepest forecast (both rules leave only
// where every sequence may leave). Each step's checks come back with the logits.
static void run_predicted_step(context & c, std::vector<step_group> & groups, const std::vector<batch_token> & b,
                               const std::vector<int> & out_row) {
    const int L = c.m->hp.n_layer, lo = c.rule.min_layer, hi = L - 2;
    const size_t nv = (size_t) c.m->hp.n_vocab;
    int deepest = -1;
    for (step_group & g : groups) {
        if (!g.exits) continue;
        g.forecast = c.forecasts[g.seq].next(lo, L);
        deepest = std::max(deepest, g.forecast);
    }
    if (c.rule.batch != batch_rule::split) for (step_group & g : groups) if (g.exits) g.forecast = deepest;
    // Lanes by (forecast block, checked): prompts and steps forecast at full depth share the head.
    std::map<std::pair<int, int>, std::vector<int>> by_lane;
    for (size_t gi = 0; gi < groups.size(); gi++) {
        const step_group & g = groups[gi];
        by_lane[{g.exits ? g.forecast : L - 1, g.exits ? 1 : 0}].push_back((int) gi);
    }
    step_plan p;
    p.seg = c.base_segment();
    p.toks.reserve(by_lane.size());
    for (auto & bl : by_lane) {
        lane ln;
        ln.first = 0;
        ln.last = L - 1;
        const int f = bl.first.first;
        if (f < L - 1) ln.river_from = f + 1;
        if (bl.first.second) {
            ln.check_first = lo;
            ln.check_last = std::min(f, hi);
        }
        p.toks.emplace_back();
        context::lane_feed fd;
        fill_lane(c, groups, b, out_row, bl.second, true, p, ln, fd);
        fd.tokens = p.toks.back().data();
        p.seg.lanes.push_back(ln);
        p.feeds.push_back(fd);
        p.lane_groups.push_back(bl.second);
    }
    p.seg.host_checks = c.rule.host_checks != 0 && c.on_cpu(0, L - 1);
    built_graph & gr = c.compute(p.seg, p.feeds);
    // The rows and every lane's similarities computed in the graph: queued copies into the output
    // buffer, one wait.
    queue_rows(c, gr, p);
    std::vector<size_t> check_at(p.seg.lanes.size(), 0);
    size_t used = 0;
    for (size_t li = 0; li < p.seg.lanes.size() && !p.seg.host_checks; li++) {
        const lane & ln = p.seg.lanes[li];
        if (ln.n_checks() == 0) continue;
        check_at[li] = used;
        used += (size_t) ln.n_checks() * ln.n_tokens();
        if (used > c.checks_room) fail(PR_ERR_INTERNAL, "similarities not reserved");
        queue_checks(c, gr, li, c.checks_out + check_at[li]);
    }
    c.settle();
    order_rows(c, p, nv);
    for (size_t li = 0; li < p.seg.lanes.size(); li++) {
        const lane & ln = p.seg.lanes[li];
        const int nc = ln.n_checks();
        std::vector<float> sim;
        if (nc > 0 && p.seg.host_checks) {
            sim = lane_similarities(c, gr, li);
        } else if (nc > 0) {
            const float * s0 = c.checks_out + check_at[li];
            sim.assign(s0, s0 + (size_t) nc * ln.n_tokens());
        }
        const size_t T = (size_t) ln.n_tokens();
        size_t row = 0;
        for (int gi : p.lane_groups[li]) {
            step_group & g = groups[gi];
            if (g.exits) {   // a decode step: one token, row `row` of the lane
                std::vector<float> mine(nc);
                for (int k = 0; k < nc; k++) mine[k] = sim[(size_t) k * T + row];
                const int first = first_at_tau(mine, lo, nc, c.rule.tau);
                g.seen = first >= 0 || g.forecast < L - 1 ? first : L - 1;
                g.exit_block = g.forecast;
                c.forecasts[g.seq].observe(g.seen, L);
            }
            row += g.idx.size();
        }
    }
}

void context::decode_batch(const std::vector<batch_token> & b, const std::vector<uint8_t> & prompt) {
    validate(*this, b);
    const int L = m->hp.n_layer;
    const size_t E = (size_t) m->hp.n_embd, nv = (size_t) m->hp.n_vocab;
    const bool exiting = rule.force_layer >= 0 || rule.tau <= 1.0f;
    std::map<int, step_group> by_seq;   // ordered by sequence id: the step's token order
    for (size_t i = 0; i < b.size(); i++) by_seq[b[i].seq].idx.push_back((int) i);
    std::vector<step_group> groups;
    for (auto & sg : by_seq) {
        step_group g = sg.second;
        g.seq = sg.first;
        const bool step = g.idx.size() == 1 && !prompt[g.idx[0]];   // the prompt rule of decode()
        g.exits = exiting && (step || rule.prefill);
        g.exit_block = L - 1;
        g.verify = std::all_of(g.idx.begin(), g.idx.end(), [&](int i) { return prompt[i] == PR_VERIFY; });
        if (!step) forget_forecast(g.seq);   // a prompt starts the sequence's forecasts afresh, as in decode()
        groups.push_back(std::move(g));
    }
    // Forecasts are for decode steps: a step with a prompt under prefill_exit keeps the checked rule.
    bool forecast = exiting && rule.mode != exit_mode::checked && rule.force_layer < 0;
    for (const step_group & g : groups) forecast = forecast && (!g.exits || (g.idx.size() == 1 && !prompt[g.idx[0]]));
    std::vector<int> out_row(b.size(), -1);
    int rows = 0;
    for (size_t i = 0; i < b.size(); i++) if (b[i].logits) out_row[i] = rows++;
    begin_step(rows, (int) b.size());
    n_outputs = rows;

    auto undecided = [&] {
        for (const step_group & g : groups) if (g.exits && !g.river) return true;
        return false;
    };
    int start = 0, end = undecided() ? std::min(rule.force_layer >= 0 ? rule.force_layer : rule.min_layer, L - 1) : L - 1;
    if (forecast && rule.mode == exit_mode::guarded) {
        // The first graph ends at the deepest forecast of the step's decode steps, at most at block L-2
        // (a graph that ends at the head decides no exits here); a step whose rule (decide) lets it
        // leave by then leaves there, the others go on in the checked path's segments.
        for (step_group & g : groups) {
            if (!g.exits) continue;
            g.forecast = forecasts[g.seq].next(rule.min_layer, L);
            end = std::max(end, std::min(g.forecast, L - 2));
        }
    }
    for (;;) {
        if (forecast && rule.mode == exit_mode::predicted) {
            run_predicted_step(*this, groups, b, out_row);
            break;
        }
        step_plan p;
        plan_step(*this, groups, b, out_row, start, end, p);
        built_graph & gr = compute(p.seg, p.feeds);
        if (end == L - 1) {
            take_rows(*this, gr, p, nv);
            break;
        }
        std::vector<std::pair<int, int>> leaving = backbone_exits(*this, gr, p, groups, end);
        for (auto & l : leaving) {
            if (!forecast || rule.mode != exit_mode::guarded) break;
            groups[l.first].seen = l.second;
            if (start == 0) l.second = end;   // guarded: at tau by the forecast block, leave there (context.cpp)
        }
        move_on(*this, gr, p, leaving, groups, E, end);
        start = end + 1;
        end = undecided() ? std::min(L - 1, end + chunk_after(end)) : L - 1;
    }
    exits.assign(b.size(), L - 1);
    forecast_of.assign(b.size(), -1);
    observed.assign(b.size(), -1);
    for (step_group & g : groups) {
        if (forecast && rule.mode == exit_mode::guarded && g.exits) {
            if (g.seen < 0) g.seen = L - 1;   // no block reached tau
            forecasts[g.seq].observe(g.seen, L);
        }
        for (int i : g.idx) {
            exits[i] = g.exit_block;
            forecast_of[i] = g.forecast;
            observed[i] = g.seen;
        }
        kv->used[g.seq] += (int) g.idx.size();
    }
    settle();   // no graph in flight when a call returns
}

} // namespace pr
