"""Drives `switchyard serve`'s tool calls with the official `openai` Python client.

Run by tests/server_tools.rs with the server's base URL and the tool-call form the
server's log named (`generic`, `hermes` or `llama3`): two tools with `tool_choice:
"required"` give `tool_calls` whose arguments parse and match their tool's schema, a
named function is the one called, `parallel_tool_calls: false` gives one call, the
streamed form reassembles to the same calls, `auto` gives content or valid calls,
`none` gives content, and a follow-up turn with the assistant's calls and `tool`
results is rendered and answered.
"""

import json
import sys

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 40},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Adds two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                    "b": {"type": "integer", "minimum": -1000, "maximum": 1000},
                },
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    },
]


def matches(name: str, arguments: dict) -> bool:
    """Whether `arguments` match tool `name`'s schema (checked by hand: the schemas are
    small and Python's `jsonschema` may be missing)."""
    if name == "get_weather":
        return (
            set(arguments) == {"city", "unit"}
            and isinstance(arguments["city"], str)
            and len(arguments["city"]) <= 40
            and arguments["unit"] in ("celsius", "fahrenheit")
        )
    if name == "add":
        return set(arguments) == {"a", "b"} and all(
            isinstance(arguments[k], int) and not isinstance(arguments[k], bool)
            and -1000 <= arguments[k] <= 1000
            for k in ("a", "b")
        )
    return False


def check_calls(message, names=("get_weather", "add")) -> list:
    """The message's calls as (name, arguments) after checking each."""
    calls = message.tool_calls
    assert calls, message
    seen = []
    for call in calls:
        assert call.type == "function", call
        assert call.id and call.id.startswith("call_"), call
        assert call.function.name in names, call
        arguments = json.loads(call.function.arguments)
        assert matches(call.function.name, arguments), call
        seen.append((call.function.name, arguments))
    assert len({c.id for c in calls}) == len(calls), calls
    return seen


def main(base_url: str, form: str) -> None:
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "What is the weather in Paris, and what is 2 plus 3?"}]
    settings = dict(model=model, messages=messages, tools=TOOLS, max_tokens=160, temperature=0, seed=3)

    required = client.chat.completions.create(**settings, tool_choice="required")
    choice = required.choices[0]
    assert choice.finish_reason == "tool_calls", required
    calls = check_calls(choice.message)

    named = client.chat.completions.create(
        **settings, tool_choice={"type": "function", "function": {"name": "add"}}
    )
    assert named.choices[0].finish_reason == "tool_calls", named
    assert all(name == "add" for name, _ in check_calls(named.choices[0].message, ("add",)))

    single = client.chat.completions.create(
        **settings, tool_choice="required", parallel_tool_calls=False
    )
    assert len(check_calls(single.choices[0].message)) == 1, single

    # Streamed: the first chunk of a call has its index, id, type and name, the next
    # ones pieces of its arguments; joined they are the whole reply's calls.
    joined, finish = {}, None
    for chunk in client.chat.completions.create(**settings, tool_choice="required", stream=True):
        for c in chunk.choices:
            for piece in c.delta.tool_calls or []:
                if piece.index not in joined:
                    assert piece.id and piece.type == "function" and piece.function.name, piece
                    joined[piece.index] = [piece.function.name, ""]
                joined[piece.index][1] += piece.function.arguments or ""
            if c.finish_reason:
                finish = c.finish_reason
    assert finish == "tool_calls", finish
    streamed = [(name, json.loads(args)) for _, (name, args) in sorted(joined.items())]
    assert streamed == calls, (streamed, calls)

    auto = client.chat.completions.create(**settings)
    message = auto.choices[0].message
    if auto.choices[0].finish_reason == "tool_calls":
        check_calls(message)
    else:
        assert message.tool_calls is None and isinstance(message.content, str), auto

    none = client.chat.completions.create(**{**settings, "max_tokens": 12}, tool_choice="none")
    assert none.choices[0].message.tool_calls is None, none
    assert none.choices[0].finish_reason in ("stop", "length"), none

    # The next turn: the calls and their results go back, rendered by the template.
    results = {"get_weather": '{"temperature": 18, "unit": "celsius"}', "add": "5"}
    history = messages + [choice.message.model_dump(exclude_none=True)]
    for call in choice.message.tool_calls:
        history.append(
            {"role": "tool", "tool_call_id": call.id, "content": results[call.function.name]}
        )
    follow = client.chat.completions.create(
        model=model, messages=history, tools=TOOLS, max_tokens=40, temperature=0
    )
    assert follow.usage.prompt_tokens > required.usage.prompt_tokens, (follow.usage, required.usage)
    reply = follow.choices[0]
    if reply.finish_reason == "tool_calls":
        check_calls(reply.message)
    else:
        assert isinstance(reply.message.content, str), follow
    print(
        f"{form}: required {calls}; auto {auto.choices[0].finish_reason} "
        f"{message.content or message.tool_calls}; follow-up {reply.finish_reason} "
        f"{reply.message.content or reply.message.tool_calls}"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
