//! MCP method names: one table gives both the string constants (for frame
//! builders) and the [`Method`] enum that code matches on instead of text.

use std::sync::Arc;

macro_rules! methods {
    ($($(#[$doc:meta])* $variant:ident, $constant:ident = $name:literal;)*) => {
        $(
            $(#[$doc])*
            #[allow(dead_code, reason = "one constant per name in the table, used or not")]
            pub(crate) const $constant: &str = $name;
        )*

        /// A JSON-RPC method the gateway understands, in either direction;
        /// any other name is kept as [`Method::Other`].
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub(crate) enum Method {
            $($(#[$doc])* $variant,)*
            /// A method the gateway has no special handling for.
            Other(Arc<str>),
        }

        impl Method {
            /// The method called `name`.
            pub(crate) fn from_name(name: &str) -> Method {
                match name {
                    $($name => Method::$variant,)*
                    other => Method::Other(other.into()),
                }
            }

            /// Its name on the wire.
            pub(crate) fn name(&self) -> &str {
                match self {
                    $(Method::$variant => $name,)*
                    Method::Other(name) => name,
                }
            }
        }
    };
}

methods! {
    Initialize, INITIALIZE = "initialize";
    Initialized, INITIALIZED = "notifications/initialized";
    Ping, PING = "ping";
    ToolsList, TOOLS_LIST = "tools/list";
    ToolsCall, TOOLS_CALL = "tools/call";
    PromptsList, PROMPTS_LIST = "prompts/list";
    PromptsGet, PROMPTS_GET = "prompts/get";
    ResourcesList, RESOURCES_LIST = "resources/list";
    ResourcesRead, RESOURCES_READ = "resources/read";
    TemplatesList, TEMPLATES_LIST = "resources/templates/list";
    Complete, COMPLETE = "completion/complete";
    Cancelled, CANCELLED = "notifications/cancelled";
    Progress, PROGRESS = "notifications/progress";
    Subscribe, SUBSCRIBE = "resources/subscribe";
    Unsubscribe, UNSUBSCRIBE = "resources/unsubscribe";
    SetLevel, SET_LEVEL = "logging/setLevel";
    Discover, DISCOVER = "server/discover";
    Listen, LISTEN = "subscriptions/listen";
    /// An upstream's resource changed.
    ResourceUpdated, RESOURCE_UPDATED = "notifications/resources/updated";
    /// A log message from an upstream.
    LogMessage, LOG_MESSAGE = "notifications/message";
    /// A modern upstream acknowledged a listen request.
    ListenAcknowledged, LISTEN_ACKNOWLEDGED = "notifications/subscriptions/acknowledged";
    ToolsListChanged, TOOLS_LIST_CHANGED = "notifications/tools/list_changed";
    PromptsListChanged, PROMPTS_LIST_CHANGED = "notifications/prompts/list_changed";
    ResourcesListChanged, RESOURCES_LIST_CHANGED = "notifications/resources/list_changed";
    /// A server asks its client for the roots it may use.
    RootsList, ROOTS_LIST = "roots/list";
    /// A server asks its client's model for a completion.
    CreateMessage, CREATE_MESSAGE = "sampling/createMessage";
    /// A server asks its client's user for input (a form or a URL).
    Elicit, ELICIT = "elicitation/create";
    /// A URL-mode elicitation finished.
    ElicitationComplete, ELICITATION_COMPLETE = "notifications/elicitation/complete";
    /// A client's roots changed.
    RootsListChanged, ROOTS_LIST_CHANGED = "notifications/roots/list_changed";
    /// A task's state (both eras' tasks).
    TasksGet, TASKS_GET = "tasks/get";
    /// A 2025-11-25 task's result, once it is terminal.
    TasksResult, TASKS_RESULT = "tasks/result";
    /// A 2025-11-25 client's tasks.
    TasksList, TASKS_LIST = "tasks/list";
    TasksCancel, TASKS_CANCEL = "tasks/cancel";
    /// A 2026-07-28 client's input for a task.
    TasksUpdate, TASKS_UPDATE = "tasks/update";
    /// A 2025-11-25 task changed status.
    TaskStatus, TASK_STATUS = "notifications/tasks/status";
    /// A 2026-07-28 task changed status (on a listen stream).
    TasksNotification, TASKS_NOTIFICATION = "notifications/tasks";
}

impl Method {
    /// For `tools/call` and `prompts/get` the `name` parameter, for
    /// `resources/read` the `uri` one, for `tasks/get`, `tasks/update` and
    /// `tasks/cancel` the `taskId`, is what the request is about (the
    /// modern era mirrors it into `Mcp-Name`).
    pub(crate) fn names_its_target(&self) -> bool {
        matches!(
            self,
            Method::ToolsCall
                | Method::PromptsGet
                | Method::ResourcesRead
                | Method::TasksGet
                | Method::TasksUpdate
                | Method::TasksCancel
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_kept() {
        for name in [TOOLS_CALL, LISTEN, LISTEN_ACKNOWLEDGED, ROOTS_LIST] {
            assert_eq!(Method::from_name(name).name(), name);
        }
        assert_eq!(Method::from_name("tools/call"), Method::ToolsCall);
        assert!(Method::from_name("tasks/get").names_its_target());
        assert!(!Method::from_name("tasks/result").names_its_target());
        let other = Method::from_name("tasks/frobnicate");
        assert_eq!(other, Method::Other("tasks/frobnicate".into()));
        assert_eq!(other.name(), "tasks/frobnicate");
    }
}
