"""All tables, one module per area; importing this package registers them on ``Base.metadata``."""

from mewdex.db.models.assistant import RUN_STATUSES, Artifact, Conversation, Message
from mewdex.db.models.base import GLOBAL_LANE_RESOURCE_KEY, Base, ScopeContext, utcnow
from mewdex.db.models.channels import (
    ChannelBindCode,
    ChannelBinding,
    ChannelBot,
    ChannelChatPacing,
    ChannelDelivery,
    ChannelInboundNonce,
    ChannelMediaCache,
)
from mewdex.db.models.library import (
    CollectionLink,
    CollectionMember,
    DerivedImageThumbnail,
    InstallationState,
    Meme,
    MemeCollection,
    MemeCollectionItem,
    MemeNearDuplicate,
    MemeTag,
    Scope,
    StorageOperation,
)
from mewdex.db.models.pipeline import (
    IMAGE_STAGE_TASK_TYPES,
    STAGES,
    AgentCallbackRequest,
    ImageNamingPool,
    ImageProcessingAttempt,
    ImageProcessingJob,
    ImageProcessingStage,
    ImageStageTask,
    OperationGrant,
    ReverseImageUsageEvent,
)
from mewdex.db.models.platform import (
    ApiToken,
    LoginFailure,
    PasswordResetLink,
    PlatformSetting,
    UsageEvent,
    User,
    UserDiskUsage,
    UserSession,
)
from mewdex.db.models.providers import (
    ExternalSystem,
    ExternalSystemAudit,
    ExternalSystemDefinition,
    ExternalSystemGrant,
    ScopeAnalysisPolicy,
)
from mewdex.db.models.queue import (
    Task,
    TaskAttempt,
    TaskBatch,
    TaskBatchItem,
    TaskLaneFairness,
    TaskLaneResourceSlot,
    TaskLaneSlot,
)
from mewdex.db.models.schedules import ScheduledJob, ScheduledJobRun
from mewdex.db.models.search import (
    MemeEmbedding,
    MemeSearchDocument,
    MemeSearchTerm,
    MemeTextEmbedding,
    MemeVisualEmbedding,
    SearchGeneration,
    SearchHead,
    SearchMigrationState,
)
from mewdex.db.models.search_feedback import SearchFeedbackEvent, SearchFeedbackQuery, SearchFeedbackSetting
from mewdex.db.models.search_marks import SearchMark
from mewdex.db.models.search_stats import MemeSearchScopeStats, MemeSearchTermStats

__all__ = [name for name in dir() if not name.startswith("_")]
