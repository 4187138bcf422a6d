"""The node agent (`aether agent`): the node's control plane plus its CNI service, registrar watch and
registrations, Kubernetes source and mesh-dns record file."""

from __future__ import annotations

from aether.agent.app import AgentConfig, RunningAgent, serve_agent

__all__ = ["AgentConfig", "RunningAgent", "serve_agent"]
