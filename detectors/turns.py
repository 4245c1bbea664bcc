"""End-of-turn tokens, per chat-template family: what the templates write after an assistant's
message (facts from the templates in ``../shared/templates``, rendered). A backend that keeps
special tokens as text may pass the model's one through at the end of the output; a detector
lists its family's in ``end_tokens`` and the core drops them there (``parsers.core.trailing``)."""

from __future__ import annotations

#: ChatML (Qwen 2.5 / 3 / 3.5, QwQ, Hermes, MiMo, MiniCPM5, LFM2, InternLM, SmolLM3, Nemotron 3, Step 3.5)
CHATML: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
#: Llama 3.x (``<|eom_id|>`` after a ``<|python_tag|>`` call); Functionary v3 and Firefunction v2 too
LLAMA3: tuple[str, ...] = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
#: Llama 4 (JSON and pythonic modes)
LLAMA4: tuple[str, ...] = ("<|eot|>", "<|eom|>", "<|end_of_text|>")
#: DeepSeek R1 / V3 / V3.1 / V3.2 / V4 (fullwidth bars, U+2581 between words)
DEEPSEEK: tuple[str, ...] = ("<｜end▁of▁sentence｜>",)
#: GLM 4.5 / 4.6 / 4.7: a turn ends where the next role begins; the templates that write GLM's call
#: format for other models end theirs with Ling 3.0's ``<|role_end|>``, Spark 2.5's DeepSeek token,
#: Hy3's ``<｜hy_eos:opensource｜>`` and Laguna's ``</assistant>``
GLM: tuple[str, ...] = ("<|user|>", "<|observation|>", "<|endoftext|>", "<|role_end|>", *DEEPSEEK, "<｜hy_eos:opensource｜>",
       "</assistant>")
#: Mistral (the ``</s>`` end-of-sequence token after every answer)
MISTRAL: tuple[str, ...] = ("</s>",)
#: Kimi K2 (``[EOS]`` is its end-of-sequence token) and Kimi K1.5
KIMI: tuple[str, ...] = ("<|im_end|>", "[EOS]")
#: Kimi K3: ``<|end_of_msg|>`` after the closing ``message`` element
KIMI_K3: tuple[str, ...] = ("<|end_of_msg|>", "[EOS]", "[EOT]")
#: MiniMax M2 / M3
MINIMAX: tuple[str, ...] = ("[e~[",)
#: Gemma 4: ``<turn|>``, and a stray ``<channel|>`` some checkpoints write at the end of an answer
GEMMA4: tuple[str, ...] = ("<turn|>", "<channel|>")
#: FunctionGemma (Gemma 3 turns)
GEMMA: tuple[str, ...] = ("<end_of_turn>",)
#: Cohere Command R7B / Command A / Cohere2
COHERE: tuple[str, ...] = ("<|END_OF_TURN_TOKEN|>",)
#: IBM Granite 3.x / 4.x
GRANITE: tuple[str, ...] = ("<|end_of_text|>",)
#: ByteDance Seed-OSS
SEED_OSS: tuple[str, ...] = ("<seed:eos>",)
#: Swiss AI Apertus
APERTUS: tuple[str, ...] = ("<|assistant_end|>",)
#: Phi-3.5 / Phi-4-mini
PHI: tuple[str, ...] = ("<|end|>", "<|endoftext|>")
#: Tencent Hunyuan (Hy3 with its tokenizer-wide suffix, and without it)
HUNYUAN: tuple[str, ...] = ("<｜hy_eos:opensource｜>", "<｜hy_eos｜>")
#: NVIDIA Nemotron Nano v2 (``<SPECIAL_12>`` closes each turn in its template)
NEMOTRON_NANO2: tuple[str, ...] = ("<SPECIAL_12>",)
