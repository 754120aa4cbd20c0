"""`pyriver chat`: an interactive terminal chat over the GGUF's chat template.

Answers stream as they are generated; the conversation is kept and re-rendered each turn, and
the KV cache reuses the common prefix, so a turn only prefills what is new. After each answer a
status line: tokens, tok/s, mean exit block and the share of block work on the river. Ctrl-C
stops an answer, Ctrl-D quits. From a pipe: one message a line, answers on stdout. A thinking
model's thoughts (its template's <think> ... </think>, split as llama-server splits them:
pyriver.text.reasoning) are shown apart, between [thinking] and [/thinking], and are not kept in
the conversation's content (its reasoning_content, which the template renders as it likes)."""
from __future__ import annotations

import sys
from typing import Dict, List, Optional

from pyriver.cli.args import device_kwargs, layout_kwargs, rope_kwargs
from pyriver.api.llama import DEFAULT_RIVER, DEFAULT_TAU, Llama
from pyriver.speculative.draft import DRAFTERS
from pyriver.speculative.lossless import describe
from pyriver.text import reasoning

HELP = """commands:
  /reset          forget the conversation
  /system TEXT    set the system message (and reset)
  /river on|off   River exits on (building the river if needed) or off
  /tau X          exit threshold
  /lossless on [river|ngram|both]|off  the river (or n-grams) drafts, full depth verifies:
                  exactly full depth's answer
  /stats          River statistics of the last answer
  /help           this text
  /quit           leave (Ctrl-D too); Ctrl-C stops an answer"""


class ChatSession:
    def __init__(self, llm, system: Optional[str], max_tokens: int, temperature: float, river_type: str):
        self.llm = llm
        self.system = system
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.river_type = river_type
        self.messages: List[Dict] = []
        self.river_on = llm.river_path is not None and llm.exit_threshold <= 1.0 and not llm.lossless
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def command(self, line: str, out) -> bool:
        """Run a /command; False means quit."""
        cmd, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        if cmd in ("quit", "exit", "q"):
            return False
        if cmd == "help":
            print(HELP, file=out)
        elif cmd == "reset":
            self.reset()
            print("[conversation cleared]", file=out)
        elif cmd == "system":
            self.system = arg or None
            self.reset()
            print("[system message set; conversation cleared]", file=out)
        elif cmd == "river":
            if arg == "on":
                if self.llm.lossless:   # exits are lossy: the drafts (verified at full depth) stop
                    self.llm.set_lossless(False)
                    print("[lossless off]", file=out)
                if self.llm.river_path is None:
                    self.llm.attach_river(self.river_type)
                tau = self.llm.exit_threshold if self.llm.exit_threshold <= 1.0 else DEFAULT_TAU
                self.llm.set_exit(tau)
                self.river_on = True
                print(f"[river {self.llm.river_path} on, tau {tau:.4g}]", file=out)
            elif arg == "off":
                if self.llm.river_path is not None:
                    self.llm.set_exit(2.0)   # tau above 1: exactly the full-depth path
                self.river_on = False
                print("[river off]", file=out)
            else:
                print("usage: /river on|off", file=out)
        elif cmd == "tau":
            try:
                tau = float(arg)
            except ValueError:
                print("usage: /tau X (for example /tau 0.98)", file=out)
                return True
            if self.llm.river_path is None:
                self.llm.attach_river(self.river_type)
            self.llm.set_exit(tau)
            self.river_on = tau <= 1.0
            print(f"[tau {tau:.4g}]", file=out)
        elif cmd == "lossless":
            self._lossless(arg, out)
        elif cmd == "stats":
            st = self.llm.river_stats()
            if st is not None and st.get("lossless") is not None:
                print(f"[{describe(st['lossless'])}]", file=out)
            elif st is None or not st["tokens"]:
                print("[no River statistics yet: /river on, then ask something]", file=out)
            else:
                hist = " ".join(f"{k}:{v}" for k, v in sorted(st["histogram"].items()))
                print(f"[tokens {st['tokens']} | mean exit block {st['mean_exit_layer']:.2f} | river work "
                      f"{100 * st['river_work_share']:.1f}% | exit histogram {hist}]", file=out)
        else:
            print(f"unknown command /{cmd}; /help lists them", file=out)
        return True

    def _lossless(self, arg: str, out) -> None:
        """Lossless mode drafts with the drafter named (pyriver.speculative.draft: the River path by default,
        exits on at the current tau or the default; n-grams need no river) and emits only what
        full depth verified; off returns to what /river had set."""
        on, _, draft = arg.partition(" ")
        draft = draft.strip() or "river"
        if on == "on" and draft in DRAFTERS:
            if draft != "ngram":
                if self.llm.river_path is None:
                    self.llm.attach_river(self.river_type)
                if self.llm.exit_threshold > 1.0:
                    self.llm.set_exit(DEFAULT_TAU)
            self.llm.set_lossless(True, draft_model=draft)
            self.river_on = False
            how = ("n-grams draft" if draft == "ngram" else f"river {self.llm.river_path} drafts"
                   + (" where n-grams do not" if draft == "both" else "") + f" at tau {self.llm.exit_threshold:.4g}")
            print(f"[lossless on: {how}, full depth verifies]", file=out)
        elif arg == "off":
            self.llm.set_lossless(False)
            self.llm.set_exit(2.0)   # back to full depth; /river on turns exits on again
            print("[lossless off]", file=out)
        else:
            print(f"usage: /lossless on [{'|'.join(DRAFTERS)}] or /lossless off", file=out)

    def answer(self, text: str, out) -> str:
        """The answer to text, written as it comes (thinking apart); its content returned."""
        self.messages.append({"role": "user", "content": text})
        parts: List[str] = []
        thought: List[str] = []
        try:
            split = self._thinking()
            for ch in self.llm.create_chat_completion(self.messages, stream=True, max_tokens=self.max_tokens,
                                                      temperature=self.temperature):
                piece = ch["choices"][0]["delta"].get("content", "")
                for d in (split.feed(piece) if split is not None else [{"content": piece}] if piece else []):
                    if "reasoning_content" in d:
                        out.write(("" if thought else "[thinking] ") + d["reasoning_content"])
                        thought.append(d["reasoning_content"])
                    elif d["content"]:
                        if thought and not parts:
                            out.write("\n[/thinking]\n")
                        parts.append(d["content"])
                        out.write(d["content"])
                    out.flush()
        except KeyboardInterrupt:
            out.write(" [stopped]")
        if thought and not parts:
            out.write("\n[/thinking]")
        reply = "".join(parts)
        msg = {"role": "assistant", "content": reply}
        if thought:
            msg["reasoning_content"] = "".join(thought)
        self.messages.append(msg)
        out.write("\n")
        return reply

    def _thinking(self) -> Optional[reasoning.Stream]:
        """The split of this turn's answer, None where the template does not think."""
        prompt, _ = self.llm.chat_prompt(self.messages)   # compiles the template on the first turn
        tags = reasoning.template_tags(getattr(self.llm.chats.template, "source", None))
        if tags is None:
            return None
        return reasoning.Stream(tags, "auto", reasoning.opened(prompt, tags))

    def status(self) -> str:
        s = self.llm.last_stats
        n = s.get("decode_tokens", 0)
        rate = n / s["decode_s"] if s.get("decode_s") else 0.0
        line = f"[{n} tokens, {rate:.1f} tok/s, prompt {s.get('prompt_eval_tokens', 0)} new tokens"
        st = self.llm.river_stats() if self.river_on or self.llm.lossless else None
        ls = st and st.get("lossless")
        if ls and ls["verify_steps"]:
            rate = ls["acceptance_rate"] if ls["acceptance_rate"] is not None else 0.0
            line += (f" | lossless: {ls['verify_steps']} verify steps, {100 * rate:.0f}% of drafts kept, "
                     f"{ls['tokens_per_step']:.2f} tok/step")
        elif st and st["tokens"]:
            line += f" | mean exit block {st['mean_exit_layer']:.1f}, river work {100 * st['river_work_share']:.0f}%"
        else:
            line += " | river off"
        return line + "]"


def run(a) -> int:
    kw = {}
    if a.river:
        kw = dict(river=a.river, exit_threshold=a.tau, min_exit_layer=a.min_exit_layer, river_force=a.river_force)
    elif not getattr(a, "no_lossless", False):
        from pyriver.speculative.draft import DEFAULT_DRAFTING  # n-grams draft where they pay
        kw = dict(DEFAULT_DRAFTING)
    if getattr(a, "batch_invariant", False):
        kw["batch_invariant"] = True
    llm = Llama(a.model, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                engine=getattr(a, "engine", "auto"), **device_kwargs(a), **layout_kwargs(a), **rope_kwargs(a), **kw)
    session = ChatSession(llm, a.system, a.n, a.temp, a.river or DEFAULT_RIVER)
    interactive = sys.stdin.isatty()
    out = sys.stdout
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
        print(f"pyriver chat: {llm.info['name'] or llm.model_path} ({llm.info['arch']} on the {llm.engine} engine); "
              "/help for commands, Ctrl-D to quit", file=out)
        if llm.calibration is not None:
            c = llm.calibration["setting"]
            tau = f"lossless k {c['draft_max']}, drafts at tau" if c.get("lossless") else "tau"
            print(f"[River on from calibration: {c['river']} {tau} {c['tau']} min layer {c['min_exit_layer']}, exit rule "
                  f"{llm.exit_rule}; /river off]",
                  file=out)
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            if interactive:
                print(file=out)
            break
        except KeyboardInterrupt:
            print(file=out)
            continue
        line = line.strip()
        if not line:
            continue
        if line.startswith("/"):
            if not session.command(line, out):
                break
            continue
        session.answer(line, out)
        if interactive:
            print(session.status(), file=out)
    llm.close()
    return 0
