"""What the routes share in one API process: the services the root built, caches, buckets."""

from __future__ import annotations

from memwarden.api.console.session import ProcessSessions, RedisSessions, SessionStore
from memwarden.api.http.auth_throttle import AuthThrottle
from memwarden.api.http.limits import CallerState, ProcessCallerState, RedisCallerState, TokenBuckets
from memwarden.api.http.metrics import Metrics
from memwarden.bootstrap.api import ApiProcess, open_api_process
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.settings import Settings, deployment_key
from memwarden.projections.reads import ReadModels

MAX_BODY_BYTES = 1_048_576
STATE_KEY = "memwarden"


class ApiState:
    """What the routes share, per process."""

    def __init__(self, settings: Settings | None, runtime: Runtime | None) -> None:
        self.settings = settings
        self._given = runtime
        self._runtime = runtime
        self.metrics = Metrics()
        self.callers: CallerState = ProcessCallerState()
        self.anonymous_audits = TokenBuckets()
        self.auth_throttle = AuthThrottle()
        self.console_sessions: SessionStore = ProcessSessions()
        self.anonymous_audits_per_minute = 6_000
        self.max_body_bytes = MAX_BODY_BYTES
        self._process: ApiProcess | None = None

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            msg = "the API runtime is not open"
            raise RuntimeError(msg)
        return self._runtime

    def deadline_seconds(self) -> float:
        """The request deadline (``Settings.request_deadline_seconds``) of the open runtime."""
        return self.runtime.settings.request_deadline_seconds

    @property
    def governance(self) -> GovernanceService:
        return self.runtime.core.governance

    @property
    def memory(self) -> MemoryService:
        return self.runtime.memory

    @property
    def reads(self) -> ReadModels:
        return self.runtime.reads

    @property
    def process(self) -> ApiProcess:
        if self._process is None:
            msg = "the API process is not open"
            raise RuntimeError(msg)
        return self._process

    def open(self) -> None:
        settings = self.settings or Settings.from_env()
        self._process = open_api_process(settings, self._given)
        self._runtime = self._process.runtime
        if settings.shared_state == "redis":
            if settings.redis_url is None:  # Settings refuses this pair; a hand-made one too
                raise ValueError("MEMWARDEN_SHARED_STATE=redis needs REDIS_URL")
            self.callers = RedisCallerState(settings.redis_url, deployment_key(settings), self.metrics)
            self.console_sessions = RedisSessions(settings.redis_url, deployment_key(settings))

    def close(self) -> None:
        if self._process is not None:
            self._process.close()
            self._process = None
            self._runtime = self._given
