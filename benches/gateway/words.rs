//! Tool names and descriptions with words in them, for the search round:
//! each floor (`--words SEED`) is a service of its own whose filler tools
//! are actions on its objects, deterministic for a seed, so queries built
//! from a description have one right answer among thousands of tools.

const SERVICES: [&str; 50] = [
    "github",
    "gitlab",
    "jira",
    "linear",
    "slack",
    "teams",
    "zoom",
    "gmail",
    "outlook",
    "calendar",
    "drive",
    "dropbox",
    "box",
    "notion",
    "confluence",
    "asana",
    "trello",
    "stripe",
    "paypal",
    "shopify",
    "quickbooks",
    "xero",
    "salesforce",
    "hubspot",
    "zendesk",
    "intercom",
    "twilio",
    "sendgrid",
    "mailchimp",
    "postgres",
    "mysql",
    "mongodb",
    "redis",
    "elastic",
    "snowflake",
    "bigquery",
    "s3",
    "gcs",
    "azureblob",
    "kubernetes",
    "docker",
    "terraform",
    "datadog",
    "sentry",
    "pagerduty",
    "grafana",
    "okta",
    "auth0",
    "figma",
    "airtable",
];

const VERBS: [(&str, &str); 20] = [
    ("create", "Create a new"),
    ("list", "List every"),
    ("get", "Fetch one"),
    ("update", "Change the fields of a"),
    ("delete", "Permanently delete a"),
    ("archive", "Archive an old"),
    ("search", "Search by keyword for a"),
    ("export", "Export to CSV each"),
    ("import", "Import from a file a"),
    ("share", "Share with teammates a"),
    ("comment", "Add a comment on a"),
    ("assign", "Assign an owner to a"),
    ("tag", "Attach labels to a"),
    ("move", "Move to another folder a"),
    ("copy", "Duplicate an existing"),
    ("restore", "Restore from the trash a"),
    ("lock", "Lock against edits a"),
    ("summarize", "Summarize in plain words a"),
    ("watch", "Subscribe to changes of a"),
    ("audit", "Show the audit history of a"),
];

const OBJECTS: [&str; 40] = [
    "issue",
    "pull_request",
    "branch",
    "release",
    "ticket",
    "sprint",
    "channel",
    "message",
    "meeting",
    "email",
    "event",
    "document",
    "folder",
    "page",
    "task",
    "board",
    "invoice",
    "payment",
    "refund",
    "order",
    "customer",
    "contact",
    "deal",
    "campaign",
    "report",
    "dashboard",
    "alert",
    "incident",
    "deployment",
    "cluster",
    "bucket",
    "table",
    "query",
    "backup",
    "user",
    "group",
    "role",
    "secret",
    "webhook",
    "template",
];

/// Tool `index` of the floor with `seed`: its name, description and the
/// names of its parameters.
pub fn tool(seed: usize, index: usize) -> (String, String, [String; 2]) {
    let service = SERVICES[seed % SERVICES.len()];
    let (verb, phrase) = VERBS[index % VERBS.len()];
    let object = OBJECTS[(index / VERBS.len() + seed * 7) % OBJECTS.len()];
    let spoken = object.replace('_', " ");
    let name = format!("{verb}_{object}");
    let description = format!(
        "{phrase} {spoken} in {service}. Works on the {service} {spoken} the caller names."
    );
    (
        name,
        description,
        [format!("{object}_id"), "note".to_owned()],
    )
}

/// How many distinct tools one floor can have.
pub const MAX_TOOLS: usize = VERBS.len() * OBJECTS.len();
