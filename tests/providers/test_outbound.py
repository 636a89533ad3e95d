"""The outbound policy: provider calls never reach private, loopback, link-local or
metadata addresses unless the operator allows them, checked on the address connected to."""

from __future__ import annotations

import pytest

from tools_app.engine import ChatRequest, UserMessage
from tools_app.engine.errors import ProviderError
from tools_app.engine.outbound import OutboundPolicy, OutboundRefused
from tools_app.engine.providers.openai import OpenAIChatModel

from .loopback import serving

REQUEST = ChatRequest(messages=(UserMessage(text="Hi"),))
ANSWER = (b'{"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0, '
          b'"message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]}')


@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("2002:7f00:1::1", "loopback"),  # 6to4 around 127.0.0.1
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.10", "private"),
    ("::ffff:10.0.0.1", "private"),
    ("fd00:ec2::254", "private"),  # AWS metadata over IPv6 (unique local)
    ("169.254.169.254", "link-local"),  # cloud metadata
    ("fe80::1", "link-local"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("100.64.0.1", "not a public address"),  # carrier-grade NAT
    ("240.0.0.1", "reserved"),
])
def test_non_public_addresses_are_refused(address: str, reason: str) -> None:
    with pytest.raises(OutboundRefused) as refused:
        OutboundPolicy().check("model.example", address)
    assert reason in refused.value.reason
    assert "AGENTFORGE_OUTBOUND_ALLOW" in str(refused.value)


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(address: str) -> None:
    OutboundPolicy().check("api.example.com", address)


def test_the_operator_allows_hosts_networks_and_loopback() -> None:
    policy = OutboundPolicy(allow=("ollama.internal", "10.0.0.0/8", "192.168.1.7"))
    policy.check("OLLAMA.internal.", "172.20.0.5")  # the host is trusted, wherever it is
    policy.check("vllm", "10.9.8.7")
    policy.check("gpu-box", "192.168.1.7")
    with pytest.raises(OutboundRefused):
        policy.check("gpu-box", "192.168.1.8")
    with pytest.raises(OutboundRefused):
        policy.check("localhost", "127.0.0.1")
    OutboundPolicy(allow_loopback=True).check("localhost", "127.0.0.1")
    with pytest.raises(OutboundRefused):
        OutboundPolicy(allow_loopback=True).check("metadata", "169.254.169.254")


async def _answer(reader: object, writer: object) -> None:
    import asyncio

    assert isinstance(reader, asyncio.StreamReader)
    assert isinstance(writer, asyncio.StreamWriter)
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    await reader.readexactly(length)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                 + str(len(ANSWER)).encode() + b"\r\n\r\n" + ANSWER)
    await writer.drain()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_refused_destination_is_never_connected_to_nor_retried(host: str) -> None:
    """A literal IP is checked before the request; a name as it resolves."""
    async with serving(_answer, path="/v1") as (base_url, accepted):
        model = OpenAIChatModel(base_url=base_url.replace("127.0.0.1", host), model="m",
                                outbound=OutboundPolicy(), max_retries=2)
        try:
            with pytest.raises(ProviderError) as refused:
                await model.chat(REQUEST)
        finally:
            await model.aclose()

    assert accepted == []
    assert refused.value.retryable is False
    assert "refused to connect to" in str(refused.value)
    assert "loopback" in str(refused.value)


@pytest.mark.parametrize("policy", [OutboundPolicy(allow_loopback=True),
                                    OutboundPolicy(allow=("localhost",)),
                                    OutboundPolicy(allow=("127.0.0.0/8",))])
async def test_an_allowed_destination_is_called(policy: OutboundPolicy) -> None:
    async with serving(_answer, path="/v1") as (base_url, accepted):
        model = OpenAIChatModel(base_url=base_url.replace("127.0.0.1", "localhost"),
                                model="m", outbound=policy)
        try:
            response = await model.chat(REQUEST)
        finally:
            await model.aclose()

    assert response.ai_message.text == "Hello"
    assert len(accepted) == 1
