"""The framework calls of tests/dropin/test_llama_cpp_frameworks.py and record_frameworks.py: LangChain's LlamaCpp /
ChatLlamaCpp / LlamaCppEmbeddings (langchain-community) and LlamaIndex's LlamaCPP, used as their documentation shows,
greedy (temperature 0, LangChain's default repeat penalty 1.1 turned off so that the tokens are the argmax of the
logits). Whichever `llama_cpp` is importable (the real one, or ubatch's after install_as_llama_cpp()) runs them."""
import warnings

N_CTX, MAX_TOKENS = 512, 12
COMPLETION, COUNTING = "The capital of France is", "Count: one, two,"
HELLO = [{"role": "user", "content": "Say hello"}]
# LangChain's LlamaCpp / ChatLlamaCpp pass their own RoPE defaults to Llama (rope_freq_base 10000, scale 1), which
# llama-cpp-python applies (and ubatch.llama_cpp too): their greedy tokens are those of that RoPE, not the model's
ROPES = {"default": {}, "langchain": {"rope_freq_base": 10000.0, "rope_freq_scale": 1.0}}
CASES = {
    "gemma3-270m": {"prompts": [COMPLETION, COUNTING], "chats": []},
    "qwen2.5-0.5b": {"prompts": [COMPLETION, COUNTING], "chats": [HELLO]},
}


def llamaindex_chat_prompt() -> str:
    """The prompt LlamaIndex's LlamaCPP.chat builds for HELLO (its generic messages_to_prompt)."""
    from llama_index.core.base.llms.generic_utils import messages_to_prompt
    from llama_index.core.llms import ChatMessage
    return messages_to_prompt([ChatMessage(role=m["role"], content=m["content"]) for m in HELLO])


def run_frameworks(path: str, chat: bool = True) -> dict:
    """Every integration call on the GGUF at path; returns {call: result} (texts, chunk lists, vector sizes)."""
    warnings.simplefilter("ignore")
    from langchain_community.chat_models import ChatLlamaCpp
    from langchain_community.embeddings import LlamaCppEmbeddings
    from langchain_community.llms import LlamaCpp
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.llama_cpp import LlamaCPP

    out = {}
    llm = LlamaCpp(model_path=path, temperature=0, repeat_penalty=1.0, max_tokens=MAX_TOKENS, n_ctx=N_CTX,
                   verbose=False)
    out["langchain.invoke"] = llm.invoke(COMPLETION)
    out["langchain.invoke_stop"] = llm.invoke(COMPLETION, stop=["."])
    out["langchain.stream"] = list(llm.stream(COUNTING))
    out["langchain.num_tokens"] = llm.get_num_tokens(COMPLETION)
    del llm
    if chat:
        cl = ChatLlamaCpp(model_path=path, temperature=0, repeat_penalty=1.0, max_tokens=MAX_TOKENS, n_ctx=N_CTX,
                          verbose=False)
        msgs = [(m["role"].replace("user", "human"), m["content"]) for m in HELLO]
        out["langchain.chat"] = cl.invoke(msgs).content
        out["langchain.chat_stream"] = [c.content for c in cl.stream(msgs)]
        del cl
    emb = LlamaCppEmbeddings(model_path=path, n_ctx=N_CTX, verbose=False)
    q = emb.embed_query("a cat")
    docs = emb.embed_documents(["a cat"])
    out["langchain.embed_query"] = [len(q), [round(x, 4) for x in q[:32]]]
    out["langchain.embed_documents"] = [len(docs), len(docs[0]), [round(x, 4) for x in docs[-1][:32]]]
    del emb
    li = LlamaCPP(model_path=path, temperature=0.0, max_new_tokens=MAX_TOKENS, context_window=N_CTX, verbose=False,
                  generate_kwargs={}, model_kwargs={})
    out["llamaindex.complete"] = li.complete(COMPLETION).text
    out["llamaindex.stream_complete"] = [r.delta for r in li.stream_complete(COUNTING)]
    out["llamaindex.chat"] = li.chat([ChatMessage(role="user", content="Say hello")]).message.content
    out["llamaindex.metadata.context_window"] = li.metadata.context_window
    del li
    return out
