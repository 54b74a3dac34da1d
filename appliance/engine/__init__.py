"""The engine: request and completion types, and the backends that serve them."""

from appliance.engine.backend import Backend, BackendCounters
from appliance.engine.types import Completion, GenerationRequest, Message, ResolvedSampling

__all__ = ["Backend", "BackendCounters", "Completion", "GenerationRequest", "Message", "ResolvedSampling"]
