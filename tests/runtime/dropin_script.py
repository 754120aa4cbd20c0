"""A script written for llama-cpp-python 0.3.36, using the API issue 26 names. It is run unchanged
by test_dropin_script.py once with `llama_cpp.Llama` and once with `pyriver.Llama` (the only
difference: the `Llama` class handed to `run`), and what it returns is compared there."""
import itertools

import numpy as np
from llama_cpp import LlamaRAMCache, LogitsProcessorList, StoppingCriteriaList

PROMPT = "Q: Name three rivers in Europe.\nA:"
MSGS = [{"role": "system", "content": "You are a terse geography tutor."},
        {"role": "user", "content": "Which river flows through Paris?"}]


def texts(res):
    c = res["choices"][0]
    return c["text"], c["finish_reason"], res["usage"]


def first_12(tokens):
    """The first 12 tokens of a generate() loop, which runs until the caller stops."""
    return list(itertools.islice(tokens, 12))


def run(Llama, path):
    out = {}
    # llama_cpp's logprobs need logits_all=True; the other arguments at llama_cpp's defaults
    llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, seed=1234, logits_all=True,
                last_n_tokens_size=64, use_mmap=True, use_mlock=False, offload_kqv=True, flash_attn=False,
                rope_freq_base=0.0, type_k=None, verbose=False)

    # model facts, metadata, the tokenizer
    out["facts"] = (llm.n_ctx(), llm.n_vocab(), llm.n_embd(), llm.token_bos(), llm.token_eos(), llm.token_nl())
    out["metadata"] = {k: llm.metadata[k] for k in ("general.architecture", "tokenizer.ggml.model", "llama.block_count")}
    tok = llm.tokenizer()
    ids = tok.encode("Hello river")
    out["tokenizer"] = (ids, tok.decode(ids))
    toks = llm.tokenize(PROMPT.encode("utf-8"))
    out["tokens"] = toks
    out["detokenize"] = llm.detokenize(toks)

    # the low-level API: eval, n_tokens, input_ids, scores, sample, generate
    llm.reset()
    llm.eval(toks)
    out["n_tokens"] = llm.n_tokens
    out["input_ids"] = llm.input_ids[: llm.n_tokens].tolist()
    out["scores"] = np.array(llm.scores[: llm.n_tokens])
    out["sample"] = llm.sample(temp=0.0)
    out["generate"] = first_12(llm.generate(toks, temp=0.0, top_k=1))

    # save_state / load_state: back to the evaluated prompt after something else ran
    llm.reset()
    llm.eval(toks)
    state = llm.save_state()
    llm.eval(llm.tokenize(b" and then something else entirely", add_bos=False))
    llm.load_state(state)
    out["restored_n_tokens"] = llm.n_tokens
    out["generate_after_load"] = first_12(llm.generate(toks, temp=0.0, top_k=1))

    # completions: greedy, stop strings, logits_processor, stopping_criteria, logit_bias
    greedy = llm(PROMPT, max_tokens=24, temperature=0, stop=["Q:"])
    out["greedy"] = texts(greedy)
    first = llm.tokenize(greedy["choices"][0]["text"].encode("utf-8"), add_bos=False)[0]

    def ban_first(input_ids, scores):
        scores[first] = -np.inf
        return scores

    out["logits_processor"] = texts(llm(PROMPT, max_tokens=16, temperature=0,
                                        logits_processor=LogitsProcessorList([ban_first])))
    n_prompt = len(toks)
    out["stopping_criteria"] = texts(llm(PROMPT, max_tokens=32, temperature=0, stopping_criteria=StoppingCriteriaList(
        [lambda input_ids, logits: len(input_ids) >= n_prompt + 5])))
    out["logit_bias"] = texts(llm(PROMPT, max_tokens=16, temperature=0, logit_bias={first: -100.0}))

    # a prompt cache: the second call restores the first one's state
    cache = LlamaRAMCache(capacity_bytes=2 << 30)
    llm.set_cache(cache)
    a = texts(llm("The longest river in Africa is", max_tokens=12, temperature=0))
    b = texts(llm("The longest river in Africa is", max_tokens=12, temperature=0))
    out["cache"] = (a, b, len(cache.cache_state) > 0)
    llm.set_cache(None)

    # seeds: set_seed and a call's seed give a sampled text, the same on every run and on both
    # classes (llama.cpp's samplers); seed=-1 draws a random one (runs, texts not compared)
    llm.set_seed(42)
    s1 = llm("Once upon a time", max_tokens=12, temperature=0.9)["choices"][0]["text"]
    llm.set_seed(42)
    s2 = llm("Once upon a time", max_tokens=12, temperature=0.9)["choices"][0]["text"]
    out["set_seed_texts"] = (s1, s2)
    out["call_seed_texts"] = [llm("Once", max_tokens=8, temperature=0.9, seed=5)["choices"][0]["text"]
                              for _ in range(2)]
    out["sampled_settings"] = [texts(llm("Rivers are", max_tokens=16, seed=7, **kw)) for kw in (
        dict(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0),
        dict(temperature=0.8, top_p=0.9, repeat_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.4),
        dict(temperature=0.7, typical_p=0.8), dict(temperature=1.0, mirostat_mode=2, mirostat_tau=4.0))]
    out["chat_sampled"] = llm.create_chat_completion(MSGS, max_tokens=16, temperature=0.9, seed=11)[
        "choices"][0]["message"]["content"]
    rnd = Llama(model_path=path, n_ctx=128, seed=-1, verbose=False)
    out["seed_minus_one_runs"] = isinstance(rnd("Hi", max_tokens=4)["choices"][0]["text"], str)
    rnd.close()

    # logprobs: with echo, and streamed
    out["logprobs"] = llm(PROMPT, max_tokens=6, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    lp = llm(PROMPT, max_tokens=6, temperature=0, logprobs=3, echo=True)
    out["echo_logprobs"] = (lp["choices"][0]["text"], lp["choices"][0]["logprobs"])
    out["echo_scores"] = np.array(llm.scores[: llm.n_tokens])   # the rows the echo call computed, their tokens
    out["echo_ids"] = [int(t) for t in llm.input_ids[: llm.n_tokens]]
    chunks = [c["choices"][0] for c in llm("The sky is", max_tokens=6, temperature=0, logprobs=3, stream=True)]
    out["stream_logprobs"] = [(c["text"], c["logprobs"]) for c in chunks if c["text"]]

    # chat: the defaults (temperature 0.2 ...; top_k=1 makes it deterministic), top_logprobs
    chat = llm.create_chat_completion(MSGS, max_tokens=24, top_k=1)
    out["chat"] = (chat["choices"][0]["message"], chat["choices"][0]["finish_reason"], chat["usage"])
    chat_lp = llm.create_chat_completion(MSGS, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    out["chat_logprobs"] = (chat_lp["choices"][0]["message"]["content"], chat_lp["choices"][0]["logprobs"])
    out["chat_stream"] = "".join(c["choices"][0]["delta"].get("content") or ""
                                 for c in llm.create_chat_completion(MSGS, max_tokens=24, top_k=1, stream=True))
    llm.close()

    # llama_cpp's registered chat formats
    for fmt in ("chatml", "llama-3", "mistral-instruct", "gemma"):
        f = Llama(model_path=path, n_ctx=512, chat_format=fmt, verbose=False)
        r = f.create_chat_completion(MSGS, max_tokens=16, temperature=0)
        out[f"chat_format={fmt}"] = (r["choices"][0]["message"]["content"], r["usage"])
        f.close()

    # embeddings
    emb = Llama(model_path=path, n_ctx=512, embedding=True, verbose=False)
    out["embed"] = np.array(emb.embed("A river runs to the sea."))
    texts_ = ["first text", "a second, longer text about rivers"]
    ce = emb.create_embedding(texts_)
    out["create_embedding"] = ([np.array(d["embedding"]) for d in ce["data"]], ce["usage"])
    out["embed_second"] = np.array(emb.embed(texts_[1]))
    emb.close()
    return out
