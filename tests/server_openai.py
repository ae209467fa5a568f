"""Drives `switchyard serve` with the official `openai` Python client.

Run by tests/server_openai.rs with the server's base URL as the only argument: a
non-streaming and a streaming chat completion with the default model (the streamed
text must equal the non-streamed text for the same seed at temperature 0), a
completion, the model list, n = 3 choices (whole and streamed), log-probabilities in
both of OpenAI's shapes (whole and streamed) parsed by the client's own types,
structured output (a JSON Schema, and a Pydantic model through the client's `parse`),
and errors the client maps to its own exceptions (an unknown model, parameters the
server does not implement or cannot honour). Tool calls: tests/server_tools.py.
"""

import json
import sys
from datetime import date
from typing import List, Literal, Optional

import openai
from openai import OpenAI
from pydantic import BaseModel, Field


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

    check_choices(client, model, messages)
    check_logprobs(client, model, messages)
    check_refusals(client, model, messages)

    print(f"openai {openai.__version__}: chat {text!r}, completion {completion.choices[0].text!r}")


def check_choices(client: OpenAI, model: str, messages: list) -> None:
    """n = 3 gives three choices, indexed 0..2, whole and streamed, chat and completion."""
    settings = dict(model=model, messages=messages, max_tokens=8, temperature=1.0, seed=5, n=3)
    whole = client.chat.completions.create(**settings)
    assert [c.index for c in whole.choices] == [0, 1, 2], whole
    texts = [c.message.content for c in whole.choices]
    assert all(texts), texts
    assert whole.usage.completion_tokens <= 3 * 8, whole.usage

    streamed, finished = ["", "", ""], set()
    for chunk in client.chat.completions.create(**settings, stream=True):
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished.add(c.index)
    assert streamed == texts, (streamed, texts)
    assert finished == {0, 1, 2}, finished

    completion = client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=4, temperature=0, n=3
    )
    assert [c.index for c in completion.choices] == [0, 1, 2], completion
    assert len({c.text for c in completion.choices}) == 1, completion


def check_logprobs(client: OpenAI, model: str, messages: list) -> None:
    """Chat's logprobs.content entries and the completions' legacy object, as typed by
    the client: one entry per generated token, alternatives best first."""
    settings = dict(model=model, messages=messages, max_tokens=6, temperature=0)
    whole = client.chat.completions.create(**settings, logprobs=True, top_logprobs=3)
    choice = whole.choices[0]
    content = choice.logprobs.content
    assert len(content) == whole.usage.completion_tokens, (content, whole.usage)
    for entry in content:
        assert isinstance(entry.token, str) and entry.logprob <= 0, entry
        assert entry.bytes == list(entry.token.encode()), entry
        assert len(entry.top_logprobs) == 3, entry
        best = [t.logprob for t in entry.top_logprobs]
        assert best == sorted(best, reverse=True), entry
        assert entry.logprob <= best[0] + 1e-6, entry
    assert "".join(e.token for e in content).startswith(choice.message.content), content

    streamed = []
    for chunk in client.chat.completions.create(
        **settings, logprobs=True, top_logprobs=3, stream=True
    ):
        for c in chunk.choices:
            if c.logprobs is not None and c.logprobs.content:
                streamed.extend(c.logprobs.content)
    assert [(e.token, e.logprob) for e in streamed] == [
        (e.token, e.logprob) for e in content
    ], (streamed, content)

    plain = client.chat.completions.create(**settings, logprobs=True)
    assert all(e.top_logprobs == [] for e in plain.choices[0].logprobs.content), plain
    assert client.chat.completions.create(**settings).choices[0].logprobs is None

    completion = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=2
    )
    logprobs = completion.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == 4, logprobs
    assert len(logprobs.top_logprobs) == len(logprobs.text_offset) == 4, logprobs
    assert all(2 <= len(top) <= 3 for top in logprobs.top_logprobs), logprobs
    assert logprobs.text_offset[0] == 0, logprobs
    assert "".join(logprobs.tokens) == completion.choices[0].text, logprobs

    streamed = []
    for chunk in client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=4, temperature=0,
        logprobs=2, stream=True,
    ):
        for c in chunk.choices:
            if c.logprobs is not None:
                streamed.extend(zip(c.logprobs.tokens, c.logprobs.text_offset))
    assert streamed == list(zip(logprobs.tokens, logprobs.text_offset)), streamed


def check_refusals(client: OpenAI, model: str, messages: list) -> None:
    """Parameters the server does not implement are 400s naming them."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    unique = {"type": "object", "properties": {"d": {"type": "array", "uniqueItems": True}}}
    refused = [
        ("tools[0].type", dict(tools=[{"type": "web_search"}])),
        ("tool_choice", dict(tools=[tool], tool_choice="sometimes")),
        ("tool_choice", dict(tool_choice="auto")),
        (
            "tools[0].function.parameters",
            dict(tools=[{"type": "function", "function": {"name": "g", "parameters": unique}}]),
        ),
        (
            "response_format.json_schema.schema",
            dict(
                response_format={
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "properties": {"d": {"type": "array", "uniqueItems": True}}},
                    },
                }
            ),
        ),
        ("logit_bias", dict(logit_bias={"999999": 5})),
        ("frequency_penalty", dict(frequency_penalty=3)),
        ("n", dict(n=17)),
        ("top_logprobs", dict(top_logprobs=2)),
    ]
    for param, extra in refused:
        try:
            client.chat.completions.create(model=model, messages=messages, max_tokens=2, **extra)
            raise AssertionError(f"{param} was accepted")
        except openai.BadRequestError as error:
            assert error.param == param, (param, error)
    plain = client.chat.completions.create(
        model=model, messages=messages, max_tokens=2, response_format={"type": "text"}
    )
    assert plain.choices[0].message.content is not None, plain
    cat = [{"role": "user", "content": "Give me a JSON object describing a cat with name and age."}]
    held = client.chat.completions.create(
        model=model, messages=cat, max_tokens=120, temperature=0,
        response_format={"type": "json_object"},
    )
    assert held.choices[0].finish_reason == "stop", held
    assert isinstance(json.loads(held.choices[0].message.content), dict), held
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    shaped = client.chat.completions.create(
        model=model, messages=cat, max_tokens=120, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "cat", "strict": True, "schema": schema}},
    )
    cat_object = json.loads(shaped.choices[0].message.content)
    assert set(cat_object) == {"name", "age"}, cat_object
    assert isinstance(cat_object["name"], str) and isinstance(cat_object["age"], int), cat_object

    # The client's own structured outputs: it turns a Pydantic model into a strict schema
    # ($defs and $ref, anyOf with null, a date format, lengths and bounds) and parses the
    # reply back into the model.
    parsed = client.beta.chat.completions.parse(
        model=model, max_tokens=150, temperature=0,
        messages=[{"role": "user", "content": "Describe a person named Ann with a dog as JSON."}],
        response_format=Person,
    ).choices[0].message.parsed
    assert isinstance(parsed, Person), parsed
    assert 0 <= parsed.age <= 120 and 1 <= len(parsed.pets) <= 2, parsed
    assert all(pet.kind in ("cat", "dog") and len(pet.name) <= 20 for pet in parsed.pets), parsed


class Pet(BaseModel):
    name: str = Field(max_length=20)
    kind: Literal["cat", "dog"]


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=30)
    nickname: Optional[str]
    age: int = Field(ge=0, le=120)
    born: date
    pets: List[Pet] = Field(min_length=1, max_length=2)


if __name__ == "__main__":
    main(sys.argv[1])
