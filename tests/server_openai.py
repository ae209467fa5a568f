"""Drives `switchyard serve` with the official `openai` Python client.

Run by tests/server_openai.rs with the server's base URL as the only argument: a
non-streaming and a streaming chat completion with the default model (the streamed
text must equal the non-streamed text for the same seed at temperature 0), a
completion, the model list, and an error the client maps to its own exception.
"""

import sys

import openai
from openai import OpenAI


def main(base_url: str) -> None:
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)

    models = client.models.list().data
    assert len(models) == 1, models
    model = models[0].id

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    settings = dict(model=model, messages=messages, max_tokens=12, temperature=0, seed=7)

    whole = client.chat.completions.create(**settings)
    assert whole.object == "chat.completion", whole
    choice = whole.choices[0]
    assert choice.message.role == "assistant", choice
    text = choice.message.content
    assert text, whole
    assert choice.finish_reason in ("stop", "length"), choice
    usage = whole.usage
    assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 12, usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage

    pieces, finish, streamed_usage, ids = [], None, None, set()
    stream = client.chat.completions.create(
        **settings, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk", chunk
        ids.add(chunk.id)
        if chunk.usage is not None:
            streamed_usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    streamed = "".join(pieces)
    assert streamed == text, (streamed, text)
    assert finish == choice.finish_reason, (finish, choice.finish_reason)
    assert len(ids) == 1, ids
    assert streamed_usage is not None and streamed_usage.completion_tokens == usage.completion_tokens

    completion = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=4, temperature=0
    )
    assert completion.object == "text_completion", completion
    assert "Paris" in completion.choices[0].text, completion
    assert completion.usage.completion_tokens == 4, completion.usage

    try:
        client.chat.completions.create(model="no-such-model", messages=messages, max_tokens=2)
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as error:
        assert error.code == "model_not_found", error

    print(f"openai {openai.__version__}: chat {text!r}, completion {completion.choices[0].text!r}")


if __name__ == "__main__":
    main(sys.argv[1])
