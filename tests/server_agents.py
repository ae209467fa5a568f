"""One tool round trip of an agent framework (`openai-agents`) against `switchyard serve`.

Run by tests/server_tools.rs with the server's base URL: an agent with one function
tool, through the framework's chat-completions model, must call the tool (the turn
requires a call) with arguments the framework parses into the function's types; the
run's items (the call and the tool's result) then go back to the model through the
framework for a final text answer.
"""

import asyncio
import sys

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

CALLS = []


@function_tool
def add(a: int, b: int) -> int:
    """Adds two integers."""
    CALLS.append((a, b))
    return a + b


async def run(base_url: str) -> None:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)
    model = OpenAIChatCompletionsModel(
        model=(await client.models.list()).data[0].id, openai_client=client
    )
    caller = Agent(
        name="calculator",
        instructions="Use the add tool to add numbers.",
        tools=[add],
        model=model,
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=80),
        tool_use_behavior="stop_on_first_tool",
    )
    called = await Runner.run(caller, "What is 2 plus 3?", max_turns=2)
    assert CALLS, "the tool was never called"
    assert called.final_output == str(sum(CALLS[0])), called.final_output
    # The call and its result go back to the model, through the framework's own
    # conversion of its items to chat messages, for the answer.
    answerer = Agent(
        name="answerer",
        instructions="Say the result of the calculation in one sentence.",
        model=model,
        model_settings=ModelSettings(temperature=0, max_tokens=40),
    )
    answered = await Runner.run(answerer, called.to_input_list(), max_turns=1)
    assert isinstance(answered.final_output, str) and answered.final_output, answered
    items = called.to_input_list()
    assert any(item.get("type") == "function_call_output" for item in items), items
    print(
        f"openai-agents: called add{CALLS[0]} -> {called.final_output}; "
        f"answer {answered.final_output!r}"
    )


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1]))
