"""A stdio MCP server on the Python `mcp` SDK (MCPServer) with a very large,
realistic tool catalog, used by the integration tests as an upstream whose
tools/list is thousands of entries long (tool search, ranking, paging).

Usage: many_tools_server.py [COUNT]      (COUNT defaults to 3000)

Registers COUNT generated tools plus one control tool, `add_tool`. The
catalog is deterministic: the same COUNT always gives the same tools, in the
same order. Names are SERVICE_ACTION_OBJECT (e.g. `slack_archive_channel`,
`stripe_list_invoices`) built from ~60 services, each with a handful of
objects of a kind (work item, document, message, infrastructure, person,
container, billing record, event, job), and ~40 actions, each applicable to
some kinds. A description is two sentences: what the action does to the
object, and what the object is (e.g. "Archive a Slack channel so it
disappears from active views but stays read-only for compliance. A Slack
channel is a shared conversation space where workspace members post
messages."). Every input schema has 1-3 properties named after the object
and action (channel_id, reason, new_owner_email, ...), each with a
description. When COUNT exceeds the distinct combinations, the catalog
repeats with a `_N` name suffix and a region/team qualifier appended to the
description, so names and descriptions stay unique.

Every generated tool answers with one text content: the JSON object
{"tool": NAME, "arguments": {...validated arguments, defaults included}}.

add_tool {name, description} registers a tool with that name and
description (no parameters; it answers like the others) and sends
notifications/tools/list_changed on this connection (and publishes the
change to 2026-07-28 subscriptions/listen streams). The server declares
tools.listChanged. Logging goes to stderr, at WARNING and above.
"""

import copy
import hashlib
import inspect
import json
import sys
from typing import Annotated

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.stdio import stdio_server
from pydantic import Field

# Services: key -> (display name, objects). An object line is
# `key|kind|gloss|attr:type:description;attr:type:description`, the gloss
# completing "A <Service> <object> is ...", the attrs what `create` takes.
SERVICES: dict[str, tuple[str, str]] = {
    "github": ("GitHub", """
repository|space|a Git repository holding source code, branches and pull requests|name:str:Repository name, unique within the owner;visibility:str:public, private or internal
issue|item|a bug report or feature request tracked against a repository|title:str:One-line summary of the problem;body:str:Markdown description with steps to reproduce
pull_request|item|a proposed set of commits from a head branch awaiting review before merge|head_branch:str:Branch that contains the changes;base_branch:str:Branch the changes should be merged into
workflow_run|job|a single execution of a GitHub Actions workflow triggered by a push or schedule|workflow_file:str:Path of the workflow YAML, e.g. .github/workflows/ci.yml;ref:str:Branch or tag to run the workflow on
release|doc|a tagged snapshot of a repository with release notes and downloadable assets|tag_name:str:Git tag the release points at, e.g. v1.4.0
"""),
    "gitlab": ("GitLab", """
project|space|a GitLab repository together with its issues, wiki and CI configuration|path:str:URL-friendly project path within the group
merge_request|item|a request to merge a source branch that collects review threads and pipeline results|source_branch:str:Branch with the proposed changes;target_branch:str:Branch to merge into
pipeline|job|a run of the jobs defined in .gitlab-ci.yml for one commit|ref:str:Branch or tag to build
snippet|doc|a shareable piece of code or text kept outside any repository|title:str:Snippet title;file_name:str:File name used for syntax highlighting
runner|infra|an agent that picks up CI jobs and executes them on its own machine|description:str:Human-readable runner description;tag_list:str:Comma-separated tags the runner accepts jobs for
"""),
    "bitbucket": ("Bitbucket", """
repository|space|a Git repository in a Bitbucket workspace with branch permissions and Pipelines|slug:str:Repository slug within the workspace
pull_request|item|a change proposal between two Bitbucket branches with required approvers|title:str:Pull request title;source_branch:str:Branch to merge from
deployment|job|a promotion of a build artifact to a Bitbucket Pipelines environment such as staging|environment:str:Target environment name, e.g. staging
branch_restriction|infra|a rule that blocks force pushes or unreviewed merges on matching branches|pattern:str:Branch glob the rule applies to, e.g. release/*
"""),
    "jira": ("Jira", """
issue|item|a unit of work such as a bug, story or subtask on a Jira board|summary:str:One-line issue summary;issue_type:str:Bug, Story, Task or Subtask
epic|item|a large body of work that groups many Jira stories under one goal|name:str:Epic name shown on the board
sprint|event|a fixed-length iteration in which a Scrum team commits to a set of issues|name:str:Sprint name;goal:str:What the team wants to achieve this sprint
board|space|a Scrum or Kanban view that visualises the workflow of one or more projects|name:str:Board name;filter_id:str:Saved filter that selects the board's issues
fix_version|doc|a planned product release that issues are scheduled to ship in|name:str:Version name, e.g. 2.3.0;release_date:str:Planned release date (YYYY-MM-DD)
"""),
    "confluence": ("Confluence", """
page|doc|a wiki page of rich text, macros and attachments inside a space|title:str:Page title;parent_page_id:str:Page under which the new page is nested
space|space|a top-level area that groups a team's pages, blog posts and permissions|key:str:Short uppercase space key, e.g. ENG;name:str:Space display name
blog_post|doc|a dated announcement published in a space's blog stream|title:str:Headline of the post
attachment|doc|a file such as a PDF or diagram uploaded to a page|file_name:str:Name of the uploaded file;page_id:str:Page the file is attached to
page_template|doc|a reusable page layout with placeholder sections for meeting notes or retros|name:str:Template name
"""),
    "linear": ("Linear", """
issue|item|a keyboard-driven work item with a priority, estimate and cycle|title:str:Issue title;priority:int:0 none, 1 urgent, 2 high, 3 medium, 4 low
cycle|event|a one- or two-week time box that Linear uses to plan a team's work|starts_at:str:First day of the cycle (YYYY-MM-DD);ends_at:str:Last day of the cycle (YYYY-MM-DD)
project|space|a time-bound deliverable that spans issues across several Linear teams|name:str:Project name;target_date:str:Date the project should ship (YYYY-MM-DD)
team|space|a group of people in Linear with its own issue key, workflow states and cycles|key:str:Short issue prefix, e.g. ENG;name:str:Team name
roadmap|doc|a timeline view that orders projects by quarter for stakeholders|name:str:Roadmap name
"""),
    "asana": ("Asana", """
task|item|a to-do with an assignee, due date and subtasks inside an Asana project|name:str:Task name;due_on:str:Due date (YYYY-MM-DD)
project|space|a list, board or timeline of Asana tasks for one initiative|name:str:Project name;layout:str:list, board or timeline
portfolio|space|a dashboard that tracks the status of many Asana projects at once|name:str:Portfolio name
goal|item|a measurable company or team objective with progress updates|name:str:Goal statement;metric_target:int:Numeric target the goal is measured against
"""),
    "trello": ("Trello", """
card|item|a draggable note on a Trello list carrying checklists, due dates and members|name:str:Card title;list_id:str:List the card is created on
board|space|a Kanban board of lists and cards shared by a Trello workspace|name:str:Board name;background:str:Background colour or image name
list|space|a vertical column on a Trello board, such as To Do or Done|name:str:List name;board_id:str:Board the list belongs to
checklist|doc|a set of check items attached to a Trello card|name:str:Checklist heading;card_id:str:Card the checklist belongs to
"""),
    "notion": ("Notion", """
page|doc|a block-based document that can nest other pages and databases|title:str:Page title;parent_id:str:Page or database the page lives under
database|infra|a table of Notion pages with typed properties, filters and views|title:str:Database title;parent_page_id:str:Page that hosts the database
database_view|doc|a saved table, board, calendar or gallery layout of a Notion database|name:str:View name;layout:str:table, board, calendar or gallery
"""),
    "slack": ("Slack", """
channel|space|a shared conversation space where workspace members post messages|name:str:Channel name without the leading #;is_private:bool:Whether only invited members can join
message|msg|a post in a Slack channel or direct message, possibly with threads and reactions|channel_id:str:Channel or DM to post in;text:str:Message text in Slack mrkdwn
user_group|person|a named @-mentionable handle, such as @oncall, that pings several members|handle:str:Mention handle without the @;name:str:Display name of the group
reminder|event|a Slackbot nudge that fires at a set time for a member|text:str:What to be reminded about;time:str:When to fire, e.g. "tomorrow at 9am"
canvas|doc|a long-form collaborative document pinned inside a Slack channel|title:str:Canvas title
workflow|job|a Workflow Builder automation triggered by a shortcut, form or schedule|name:str:Workflow name;trigger:str:shortcut, form, schedule or webhook
"""),
    "discord": ("Discord", """
server|space|a community (guild) with its own channels, roles and members|name:str:Server name;region:str:Voice region, e.g. us-east
channel|space|a text, voice or forum room inside a Discord server|name:str:Channel name;channel_type:str:text, voice or forum
role|infra|a named set of permissions and a colour given to members of a Discord server|name:str:Role name;color:str:Hex colour, e.g. #5865F2
message|msg|a chat post in a Discord channel, possibly with embeds and attachments|channel_id:str:Channel to post in;content:str:Message content (up to 2000 characters)
scheduled_event|event|a planned stage or voice gathering announced to a Discord server|name:str:Event name;start_time:str:Start time in ISO 8601
"""),
    "teams": ("Microsoft Teams", """
team|space|a Microsoft 365 group with channels, files and apps for collaboration|display_name:str:Team name;visibility:str:public or private
channel|space|a topic-focused conversation area within a team, standard or private|display_name:str:Channel name;membership_type:str:standard, private or shared
chat_message|msg|a post or reply in a Teams channel or chat|channel_id:str:Channel to post in;body:str:Message body in HTML
meeting|event|an online Teams meeting with a join link, lobby and recording options|subject:str:Meeting subject;start_time:str:Start time in ISO 8601
"""),
    "zoom": ("Zoom", """
meeting|event|a scheduled or instant video call with a join URL and passcode|topic:str:Meeting topic;duration_minutes:int:Planned length in minutes
webinar|event|a one-to-many broadcast with panelists, registration and Q&A|topic:str:Webinar title;start_time:str:Start time in ISO 8601
cloud_recording|doc|an MP4 and transcript of a Zoom meeting stored in the Zoom cloud|meeting_id:str:Meeting the recording belongs to
user|person|a licensed or basic member of a Zoom account|email:str:Login email of the user;license_type:str:basic or licensed
"""),
    "gmail": ("Gmail", """
email|msg|a single message in a Gmail mailbox, with headers, body and attachments|to:str:Comma-separated recipient addresses;subject:str:Subject line
draft|msg|an unsent Gmail message saved for later editing|to:str:Comma-separated recipient addresses;subject:str:Subject line
thread|msg|a Gmail conversation that groups an email and all its replies|subject:str:Subject shared by the conversation
filter|infra|a Gmail rule that labels, archives or forwards incoming mail matching criteria|criteria:str:Search expression, e.g. from:billing@example.com;action:str:label, archive, forward or delete
"""),
    "outlook": ("Outlook", """
email|msg|a message in an Outlook mailbox folder such as Inbox or Sent Items|to:str:Comma-separated recipient addresses;subject:str:Subject line
calendar_event|event|an Outlook appointment or meeting request with attendees and a room|subject:str:Event subject;start:str:Start time in ISO 8601
contact|person|an entry in an Outlook address book with phone numbers and addresses|display_name:str:Full name;email:str:Primary email address
inbox_rule|infra|an Outlook server-side rule that moves, flags or forwards incoming messages|display_name:str:Rule name;condition:str:Sender, subject or keyword condition
mail_folder|space|a folder in an Outlook mailbox that holds messages and subfolders|display_name:str:Folder name
"""),
    "calendar": ("Google Calendar", """
event|event|a Google Calendar entry with a time, guests, reminders and a Meet link|summary:str:Event title;start:str:Start time in ISO 8601
calendar|space|a named Google calendar, such as a team or room calendar, with its own sharing settings|summary:str:Calendar name;time_zone:str:IANA time zone, e.g. Europe/Berlin
out_of_office_block|event|a Google Calendar block that auto-declines meetings while someone is away|start:str:First day away (YYYY-MM-DD);end:str:Last day away (YYYY-MM-DD)
focus_time_block|event|a Google Calendar block that mutes chat notifications for deep work|start:str:Start time in ISO 8601;duration_minutes:int:Length of the block in minutes
"""),
    "drive": ("Google Drive", """
file|doc|a document, spreadsheet, PDF or image stored in Google Drive|name:str:File name;mime_type:str:MIME type, e.g. application/pdf
folder|space|a Google Drive folder that organises files and inherits sharing|name:str:Folder name;parent_id:str:Folder to create it in
shared_drive|space|a team-owned Google Drive whose files belong to the organisation, not a person|name:str:Shared drive name
spreadsheet|doc|a Google Sheets workbook with tabs, formulas and charts|title:str:Workbook title
"""),
    "dropbox": ("Dropbox", """
file|doc|a file synced to a Dropbox account with version history|path:str:Full Dropbox path, e.g. /Reports/q3.pdf
folder|space|a Dropbox directory that can be shared with other accounts|path:str:Full Dropbox path of the folder
shared_link|infra|a public or password-protected URL that gives access to a Dropbox file|path:str:Path of the file to link;expires:str:Expiry date (YYYY-MM-DD)
paper_doc|doc|a collaborative Dropbox Paper document with to-dos and embeds|title:str:Document title
"""),
    "box": ("Box", """
file|doc|a file in Box with previews, versions and retention|name:str:File name;parent_folder_id:str:Folder to upload into
folder|space|a Box folder with collaborators and inherited permissions|name:str:Folder name;parent_folder_id:str:Parent folder
retention_policy|infra|a Box governance rule that keeps or deletes content after a period|policy_name:str:Policy name;retention_days:int:How long content is kept
metadata_template|doc|a Box schema of custom fields, such as contract value, applied to files|display_name:str:Template name
"""),
    "s3": ("Amazon S3", """
bucket|infra|a globally named container of objects in one AWS region|bucket_name:str:Globally unique bucket name;region:str:AWS region, e.g. eu-west-1
object|doc|a blob stored under a key in an S3 bucket, with metadata and versions|bucket_name:str:Bucket to write to;key:str:Object key, e.g. logs/2024/app.log
lifecycle_rule|infra|an S3 rule that transitions objects to Glacier or expires them after N days|prefix:str:Key prefix the rule applies to;expiration_days:int:Days after which objects expire
access_point|infra|a named network endpoint with its own policy for reaching a shared S3 bucket|name:str:Access point name;bucket_name:str:Bucket it serves
"""),
    "gcs": ("Google Cloud Storage", """
bucket|infra|a Google Cloud Storage container with a location and storage class|name:str:Bucket name;storage_class:str:STANDARD, NEARLINE, COLDLINE or ARCHIVE
object|doc|a blob in a Google Cloud Storage bucket addressed by its name|bucket:str:Bucket to write to;name:str:Object name
hmac_key|infra|an access key pair that lets S3-compatible tools authenticate to Google Cloud Storage|service_account_email:str:Service account the key belongs to
"""),
    "postgres": ("PostgreSQL", """
table|infra|a relation of typed columns and rows in a PostgreSQL schema|table_name:str:Table name;schema_name:str:Schema to create it in, e.g. public
database|infra|a PostgreSQL database on the cluster with its own schemas and owner|name:str:Database name;owner:str:Role that owns the database
role|person|a PostgreSQL login or group role holding privileges|role_name:str:Role name;can_login:bool:Whether the role may log in
index|infra|a B-tree, GIN or BRIN structure that speeds up PostgreSQL queries on some columns|table_name:str:Table to index;columns:str:Comma-separated column list
replication_slot|infra|a PostgreSQL slot that retains WAL until a logical or physical replica consumes it|slot_name:str:Slot name;plugin:str:Output plugin, e.g. pgoutput
materialized_view|infra|a PostgreSQL query result stored on disk and refreshed on demand|view_name:str:View name;query:str:SELECT statement that defines it
"""),
    "mysql": ("MySQL", """
table|infra|an InnoDB table with columns, keys and indexes in a MySQL schema|table_name:str:Table name;engine:str:Storage engine, usually InnoDB
schema|infra|a MySQL database that namespaces tables, views and routines|schema_name:str:Schema name;charset:str:Default character set, e.g. utf8mb4
user|person|a MySQL account identified by user name and host with granted privileges|user_name:str:Account name;host:str:Host pattern, e.g. %
stored_procedure|infra|a named block of SQL stored in a MySQL schema and invoked with CALL|name:str:Procedure name;body:str:SQL body of the procedure
"""),
    "mongodb": ("MongoDB", """
collection|infra|a group of BSON documents in a MongoDB database, optionally with a validator|name:str:Collection name;database:str:Database that holds it
document|doc|a single BSON record in a MongoDB collection|collection:str:Collection to insert into;document_json:str:The document as JSON
index|infra|a MongoDB index on one or more document fields, including TTL and text indexes|collection:str:Collection to index;keys_json:str:Index keys as JSON, e.g. {"email": 1}
cluster|infra|a MongoDB Atlas replica set or sharded deployment in a cloud region|name:str:Cluster name;tier:str:Instance tier, e.g. M10
"""),
    "redis": ("Redis", """
key|infra|a Redis entry holding a string, hash, list, set or sorted set, optionally with a TTL|key:str:Key name;ttl_seconds:int:Expiry in seconds, 0 for none
stream|infra|an append-only Redis log of entries consumed by consumer groups|stream_key:str:Stream key name
consumer_group|infra|a set of Redis stream readers that share the work of processing entries|stream_key:str:Stream the group reads;group_name:str:Group name
instance|infra|a managed Redis server with memory limits and an eviction policy|name:str:Instance name;memory_gb:int:Memory size in GB
"""),
    "elasticsearch": ("Elasticsearch", """
index|infra|an Elasticsearch collection of documents with mappings, shards and replicas|index_name:str:Index name;shards:int:Number of primary shards
document|doc|a JSON record stored and full-text indexed in an Elasticsearch index|index_name:str:Index to store into;document_json:str:The document as JSON
index_alias|infra|a secondary Elasticsearch name that points at one or more indices for zero-downtime reindexing|alias_name:str:Alias name;index_name:str:Index it points at
snapshot|job|a backup of Elasticsearch indices written to a snapshot repository|repository:str:Snapshot repository name;indices:str:Comma-separated indices to include
"""),
    "bigquery": ("BigQuery", """
dataset|infra|a BigQuery container of tables and views that sets location and access|dataset_id:str:Dataset name;location:str:Location, e.g. EU or US
table|infra|a columnar BigQuery table, possibly partitioned by date and clustered|table_id:str:Table name;dataset_id:str:Dataset that holds it
query_job|job|an asynchronous BigQuery SQL execution with bytes processed and slot usage|sql:str:Standard SQL to run;dry_run:bool:Only estimate bytes, do not run
scheduled_query|job|a BigQuery transfer config that reruns SQL on a cron and writes to a table|display_name:str:Scheduled query name;schedule:str:Schedule, e.g. every 24 hours
view|infra|a saved BigQuery SQL query exposed as a virtual table|view_id:str:View name;sql:str:Query that defines the view
"""),
    "snowflake": ("Snowflake", """
warehouse|infra|a Snowflake virtual compute cluster that auto-suspends when idle|name:str:Warehouse name;size:str:XSMALL, SMALL, MEDIUM or LARGE
table|infra|a Snowflake table with micro-partitions and Time Travel history|table_name:str:Table name;schema_name:str:Schema to create it in
stage|infra|a Snowflake location, internal or on S3, that files are loaded from|stage_name:str:Stage name;url:str:External location, e.g. s3://bucket/path
task|job|a Snowflake scheduled SQL statement, possibly part of a DAG of tasks|task_name:str:Task name;schedule:str:CRON expression or interval
pipe|job|a Snowpipe definition that continuously loads new files from a stage|pipe_name:str:Pipe name;copy_statement:str:COPY INTO statement it runs
"""),
    "stripe": ("Stripe", """
customer|person|a Stripe record of a payer with saved payment methods and billing details|email:str:Customer email address;name:str:Full name or company name
payment_intent|money|a Stripe object that tracks one card payment from creation through 3-D Secure to capture|amount_cents:int:Amount in the smallest currency unit;currency:str:Three-letter ISO currency code
invoice|money|an itemised Stripe bill sent to a customer and paid automatically or by link|customer_id:str:Customer to bill;days_until_due:int:Payment terms in days
subscription|money|a recurring Stripe billing plan for a customer that renews each period|customer_id:str:Customer who subscribes;price_id:str:Price to charge each period
refund|money|money returned to a customer's card for a previous Stripe charge|charge_id:str:Charge to refund;amount_cents:int:Amount to refund in cents
product|money|an item or service in the Stripe catalog with one or more prices|name:str:Product name;description:str:What the customer is buying
payout|money|a transfer of a Stripe balance to the merchant's bank account|amount_cents:int:Amount to pay out in cents;currency:str:Three-letter ISO currency code
coupon|money|a Stripe discount, percentage or fixed amount, applied to invoices or subscriptions|percent_off:int:Percentage discount;duration:str:once, repeating or forever
"""),
    "paypal": ("PayPal", """
payment|money|a PayPal checkout order that a buyer approves and the merchant captures|amount:str:Amount as a decimal string, e.g. 19.99;currency:str:Three-letter ISO currency code
payout|money|a PayPal batch that sends money to many recipients' email addresses|recipient_email:str:PayPal account to pay;amount:str:Amount as a decimal string
dispute|item|a PayPal buyer claim or chargeback that the merchant must answer with evidence|transaction_id:str:Disputed transaction;reason:str:Reason code given by the buyer
invoice|money|a PayPal invoice emailed to a payer with a Pay Now button|recipient_email:str:Payer email address;amount:str:Total as a decimal string
"""),
    "shopify": ("Shopify", """
product|money|a Shopify storefront item with variants, inventory and images|title:str:Product title;vendor:str:Brand or vendor name
order|money|a Shopify purchase by a shopper with line items, shipping and payment status|customer_email:str:Shopper email;line_items_json:str:Line items as JSON
customer|person|a Shopify shopper account with addresses, order history and marketing consent|email:str:Customer email;accepts_marketing:bool:Whether the customer opted into marketing emails
collection|space|a Shopify grouping of products, manual or rule-based, shown on the storefront|title:str:Collection title;rules:str:Smart collection rule, e.g. tag = summer
discount_code|money|a Shopify promo code that takes money or a percentage off at checkout|code:str:The code shoppers type;value:int:Discount value
fulfillment|job|a Shopify shipment of order items with a carrier and tracking number|order_id:str:Order being shipped;tracking_number:str:Carrier tracking number
"""),
    "quickbooks": ("QuickBooks", """
invoice|money|a QuickBooks sales form that records what a customer owes|customer_ref:str:Customer to invoice;total:str:Total as a decimal string
bill|money|a QuickBooks record of money owed to a vendor for goods or services|vendor_ref:str:Vendor who sent the bill;due_date:str:Due date (YYYY-MM-DD)
expense|money|a QuickBooks purchase paid immediately by card, cash or check|payee:str:Who was paid;amount:str:Amount as a decimal string
vendor|person|a QuickBooks supplier the business buys from and pays bills to|display_name:str:Vendor name;email:str:Vendor email
ledger_account|infra|an entry in the QuickBooks chart of accounts, such as Office Supplies|name:str:Account name;account_type:str:Income, Expense, Asset, Liability or Equity
"""),
    "xero": ("Xero", """
invoice|money|a Xero accounts-receivable invoice with line items and tax rates|contact_id:str:Contact being invoiced;due_date:str:Due date (YYYY-MM-DD)
bank_transaction|money|a spend or receive money line imported from a bank feed into Xero|bank_account_id:str:Bank account it belongs to;amount:str:Amount as a decimal string
contact|person|a Xero customer or supplier with addresses and payment terms|name:str:Contact name;email:str:Contact email
purchase_order|money|a Xero order sent to a supplier before a bill arrives|contact_id:str:Supplier;delivery_date:str:Expected delivery (YYYY-MM-DD)
"""),
    "salesforce": ("Salesforce", """
lead|person|a Salesforce prospect who has shown interest but is not yet qualified|last_name:str:Lead's last name;company:str:Company the lead works for
opportunity|item|a Salesforce potential deal with a stage, amount and close date|name:str:Opportunity name;stage:str:Sales stage, e.g. Prospecting
account|person|a Salesforce company record that groups contacts and opportunities|name:str:Account name;industry:str:Industry, e.g. Manufacturing
case|item|a Salesforce customer support issue routed to an agent queue|subject:str:Case subject;priority:str:Low, Medium or High
report|doc|a Salesforce tabular or summary report built on a report type|name:str:Report name;report_type:str:Report type API name
campaign|msg|a Salesforce marketing effort whose members and responses are tracked|name:str:Campaign name;campaign_type:str:Email, Webinar, Event or Advertisement
"""),
    "hubspot": ("HubSpot", """
contact|person|a HubSpot CRM person with lifecycle stage, activities and email engagement|email:str:Contact email;lifecycle_stage:str:subscriber, lead or customer
deal|item|a HubSpot revenue opportunity moving through a pipeline of stages|deal_name:str:Deal name;amount:str:Expected amount as a decimal string
company|person|a HubSpot CRM organisation that associates contacts and deals|domain:str:Company website domain;name:str:Company name
ticket|item|a HubSpot service request from a customer tracked through a help desk pipeline|subject:str:Ticket subject;pipeline_stage:str:Stage, e.g. New
marketing_email|msg|a HubSpot email built in the drag-and-drop editor and sent to a list|name:str:Internal email name;subject:str:Subject line
form|doc|a HubSpot embeddable form that captures leads on landing pages|name:str:Form name;fields:str:Comma-separated field names
"""),
    "zendesk": ("Zendesk", """
ticket|item|a Zendesk customer support request with requester, priority and conversation history|subject:str:Ticket subject;priority:str:low, normal, high or urgent
macro|doc|a Zendesk canned set of actions and replies an agent applies to a ticket in one click|title:str:Macro title;actions_json:str:Actions as JSON
help_center_article|doc|a Zendesk Guide self-service article in a help center section|title:str:Article title;section_id:str:Section to publish in
organization|person|a Zendesk company whose users share tickets and SLAs|name:str:Organization name;domain_names:str:Comma-separated email domains
sla_policy|infra|a Zendesk service level target for first reply and resolution times|title:str:Policy name;first_reply_minutes:int:First reply target in minutes
"""),
    "intercom": ("Intercom", """
conversation|msg|an Intercom chat between a customer and the support team in the Messenger|contact_id:str:Customer who started it;body:str:Opening message
contact|person|an Intercom user or lead with custom attributes and event history|email:str:Contact email;role:str:user or lead
help_article|doc|an Intercom Articles page that Fin and the Messenger suggest to customers|title:str:Article title;body:str:Article body in HTML
team_inbox|space|an Intercom inbox that routes conversations to a group of teammates|name:str:Inbox name
"""),
    "freshdesk": ("Freshdesk", """
ticket|item|a Freshdesk support ticket from email, portal or chat with a status and group|subject:str:Ticket subject;email:str:Requester email
canned_response|doc|a Freshdesk saved reply agents insert into tickets|title:str:Response title;content:str:Reply text
solution_article|doc|a Freshdesk knowledge base article in a solution folder|title:str:Article title;folder_id:str:Folder to place it in
agent|person|a Freshdesk support staff member with a role and ticket scope|email:str:Agent email;ticket_scope:int:1 global, 2 group, 3 restricted
"""),
    "pagerduty": ("PagerDuty", """
incident|event|a PagerDuty alert escalation that pages the on-call responder until acknowledged|title:str:Incident title;urgency:str:high or low
on_call_schedule|event|a PagerDuty rotation that decides who is on call at every hour|name:str:Schedule name;time_zone:str:IANA time zone
escalation_policy|infra|a PagerDuty chain of rules saying whom to page next when nobody acknowledges|name:str:Policy name;num_loops:int:How many times to repeat the rules
service|infra|a PagerDuty representation of a monitored application that receives alerts|name:str:Service name;escalation_policy_id:str:Policy used for its incidents
maintenance_window|event|a PagerDuty period during which a service's alerts do not page anyone|start_time:str:Start in ISO 8601;end_time:str:End in ISO 8601
"""),
    "datadog": ("Datadog", """
monitor|infra|a Datadog alert condition on a metric, log or trace query with notification targets|name:str:Monitor name;query:str:Monitor query, e.g. avg(last_5m):avg:system.cpu.user{*} > 90
dashboard|doc|a Datadog board of timeseries, toplists and heatmaps widgets|title:str:Dashboard title;layout_type:str:ordered or free
slo|infra|a Datadog service level objective with an error budget over a rolling window|name:str:SLO name;target:int:Target percentage, e.g. 99
log_pipeline|infra|a Datadog chain of processors that parse and enrich incoming logs|name:str:Pipeline name;filter_query:str:Logs the pipeline processes
synthetic_test|job|a Datadog scripted API or browser check run from managed locations|name:str:Test name;url:str:URL the test requests
downtime|event|a Datadog window that silences monitors during planned work|scope:str:Tags to silence, e.g. env:staging;end:str:End time in ISO 8601
"""),
    "sentry": ("Sentry", """
issue|item|a Sentry group of similar error events with a stack trace and affected users|title:str:Issue title;level:str:error, warning or info
project|space|a Sentry project that receives events from one application's SDK|name:str:Project name;platform:str:SDK platform, e.g. python
release|doc|a Sentry version of deployed code that links commits to new errors|version:str:Release version string
alert_rule|infra|a Sentry rule that notifies a channel when an error spikes or a metric crosses a threshold|name:str:Rule name;threshold:int:Event count that triggers the alert
"""),
    "grafana": ("Grafana", """
dashboard|doc|a Grafana collection of panels querying Prometheus, Loki or other data sources|title:str:Dashboard title;folder_uid:str:Folder to save into
alert_rule|infra|a Grafana-managed alert evaluated on a schedule with contact points|title:str:Rule title;condition:str:Query condition expression
data_source|infra|a Grafana connection to a backend such as Prometheus, Loki or PostgreSQL|name:str:Data source name;url:str:Backend URL
folder|space|a Grafana folder that groups dashboards and alert rules with shared permissions|title:str:Folder title
annotation|doc|a Grafana marker on a graph that records an event such as a deploy|text:str:Annotation text;tags:str:Comma-separated tags
"""),
    "kubernetes": ("Kubernetes", """
deployment|infra|a Kubernetes controller that keeps a number of identical pod replicas running|name:str:Deployment name;image:str:Container image, e.g. nginx:1.27
pod|infra|the smallest Kubernetes unit, one or more containers sharing a network namespace|name:str:Pod name;image:str:Container image
namespace|space|a Kubernetes scope that isolates names, quotas and RBAC within a cluster|name:str:Namespace name
config_map|infra|a Kubernetes object holding non-secret configuration as key-value pairs|name:str:ConfigMap name;data_json:str:Key-value pairs as JSON
cron_job|job|a Kubernetes controller that creates Jobs on a cron schedule|name:str:CronJob name;schedule:str:Cron schedule, e.g. 0 3 * * *
service|infra|a Kubernetes stable virtual IP and DNS name that load-balances to matching pods|name:str:Service name;port:int:Port the service exposes
"""),
    "docker": ("Docker", """
container|infra|a running or stopped Docker process created from an image|image:str:Image to run;name:str:Container name
image|infra|a layered Docker filesystem snapshot tagged in a registry|repository:str:Repository, e.g. library/redis;tag:str:Tag, e.g. 7-alpine
volume|infra|persistent Docker storage mounted into containers that outlives them|name:str:Volume name;driver:str:Volume driver, usually local
network|infra|a Docker bridge or overlay network that lets containers reach each other by name|name:str:Network name;driver:str:bridge or overlay
"""),
    "terraform": ("Terraform Cloud", """
workspace|space|a Terraform Cloud unit holding one configuration's state, variables and runs|name:str:Workspace name;terraform_version:str:Terraform version, e.g. 1.9.5
run|job|a Terraform Cloud plan-and-apply cycle queued for a workspace|workspace_id:str:Workspace to run in;message:str:Why the run was queued
variable|infra|a Terraform or environment variable set on a Terraform Cloud workspace|key:str:Variable name;sensitive:bool:Whether the value is write-only
state_version|doc|a Terraform Cloud snapshot of a workspace's state file after an apply|workspace_id:str:Workspace the state belongs to
"""),
    "ec2": ("Amazon EC2", """
instance|infra|an EC2 virtual machine of a given instance type in a subnet|instance_type:str:Instance type, e.g. t3.micro;ami_id:str:Machine image to boot
security_group|infra|an EC2 virtual firewall of inbound and outbound rules for instances|group_name:str:Security group name;vpc_id:str:VPC it belongs to
machine_image|infra|an EC2 AMI that captures a root volume and launch permissions|name:str:AMI name;instance_id:str:Instance to image
elastic_ip|infra|a static public IPv4 address that can be remapped between EC2 instances|domain:str:vpc or standard
ebs_volume|infra|an EC2 block storage disk that attaches to one instance at a time|size_gb:int:Size in GiB;volume_type:str:gp3, io2 or st1
"""),
    "lambda": ("AWS Lambda", """
function|infra|a serverless AWS Lambda handler invoked by events with a runtime and memory size|function_name:str:Function name;runtime:str:Runtime, e.g. python3.12
layer|infra|an AWS Lambda archive of shared libraries that functions import|layer_name:str:Layer name;compatible_runtimes:str:Comma-separated runtimes
function_alias|infra|an AWS Lambda pointer to a function version used for weighted rollouts|name:str:Alias name;function_version:str:Version it points to
event_source_mapping|infra|an AWS Lambda link that polls SQS, Kinesis or DynamoDB and invokes a function|event_source_arn:str:Queue or stream ARN;batch_size:int:Records per invocation
"""),
    "cloudflare": ("Cloudflare", """
dns_record|infra|a Cloudflare A, CNAME, MX or TXT record, optionally proxied|name:str:Record name, e.g. www;content:str:Record value, e.g. an IP address
zone|infra|a domain managed by Cloudflare with its DNS, TLS and caching settings|name:str:Domain name, e.g. example.com
waf_rule|infra|a Cloudflare web application firewall rule that blocks or challenges requests|expression:str:Rule expression, e.g. ip.src in {203.0.113.0/24};action:str:block, challenge or log
worker|infra|a Cloudflare Workers script that runs JavaScript at the edge on matching routes|script_name:str:Worker name;route:str:Route pattern, e.g. example.com/api/*
page_rule|infra|a Cloudflare URL pattern rule that changes caching, redirects or security level|target:str:URL pattern;setting:str:Setting to apply, e.g. cache_level=bypass
"""),
    "twilio": ("Twilio", """
sms_message|msg|a Twilio text message sent to or from a phone number with a delivery status|to:str:Destination number in E.164;body:str:Message text
phone_number|infra|a Twilio number with voice and SMS webhooks configured|phone_number:str:Number in E.164;voice_url:str:Webhook for incoming calls
voice_call|event|a Twilio phone call driven by TwiML instructions|to:str:Number to call in E.164;twiml_url:str:URL returning TwiML
verify_service|infra|a Twilio configuration for one-time passcodes sent by SMS or email|friendly_name:str:Service name;code_length:int:Digits in each code
"""),
    "sendgrid": ("SendGrid", """
transactional_email|msg|a SendGrid API-sent email such as a receipt or password reset|to:str:Recipient address;template_id:str:Dynamic template to render
dynamic_template|doc|a SendGrid Handlebars email template with versions|name:str:Template name
contact_list|space|a SendGrid marketing list of contacts that campaigns are sent to|name:str:List name
suppression|infra|a SendGrid bounce, block or unsubscribe entry that stops mail to an address|email:str:Suppressed address;group_id:str:Unsubscribe group
"""),
    "mailchimp": ("Mailchimp", """
campaign|msg|a Mailchimp newsletter sent to an audience segment with open and click tracking|subject_line:str:Subject line;list_id:str:Audience to send to
audience|space|a Mailchimp list of subscribers with merge fields and signup forms|name:str:Audience name;from_email:str:Default sender address
subscriber|person|a Mailchimp audience member with a subscription status and tags|email_address:str:Subscriber email;status:str:subscribed, pending or unsubscribed
customer_journey|job|a Mailchimp automated series of emails triggered by subscriber behaviour|name:str:Journey name;trigger:str:Starting point, e.g. signup
email_template|doc|a Mailchimp reusable HTML layout for campaigns|name:str:Template name;html:str:Template HTML
"""),
    "okta": ("Okta", """
user|person|an Okta identity with profile attributes, factors and app assignments|login:str:Login, usually an email;first_name:str:Given name
group|person|an Okta collection of users used to assign applications and policies|name:str:Group name;description:str:What the group is for
application|infra|an Okta SAML or OIDC app integration that users sign in to|label:str:App label;sign_on_mode:str:SAML_2_0 or OPENID_CONNECT
sign_on_policy|infra|an Okta rule set that decides when MFA is required at sign-in|name:str:Policy name;priority:int:Evaluation order
"""),
    "auth0": ("Auth0", """
user|person|an Auth0 identity from a database, social or enterprise connection|email:str:User email;connection:str:Connection name, e.g. Username-Password-Authentication
role|infra|an Auth0 named set of permissions assigned to users for RBAC|name:str:Role name;description:str:What the role allows
connection|infra|an Auth0 identity source such as Google, SAML or a user database|name:str:Connection name;strategy:str:auth0, google-oauth2, samlp, ...
login_action|job|an Auth0 Action script that runs during the login flow|name:str:Action name;code:str:JavaScript source
"""),
    "figma": ("Figma", """
design_file|doc|a Figma canvas of frames, layers and prototypes edited in real time|name:str:File name;project_id:str:Project to create it in
component|doc|a reusable Figma design element published to a team library|name:str:Component name;file_key:str:File that defines it
project|space|a Figma folder of design files within a team|name:str:Project name
prototype|doc|a clickable Figma flow that links frames with interactions|name:str:Prototype name;starting_frame:str:Frame the flow starts at
"""),
    "airtable": ("Airtable", """
base|space|an Airtable workspace database made of linked tables|name:str:Base name;workspace_id:str:Workspace that owns it
table|infra|an Airtable grid of records with typed fields in a base|name:str:Table name;base_id:str:Base to create it in
record|item|a single row in an Airtable table with field values and attachments|table_id:str:Table to add to;fields_json:str:Field values as JSON
view|doc|an Airtable saved grid, kanban, calendar or gallery arrangement of a table|name:str:View name;view_type:str:grid, kanban, calendar or gallery
"""),
    "vercel": ("Vercel", """
deployment|job|a Vercel build and immutable preview or production URL of a Git commit|project:str:Project to deploy;target:str:preview or production
project|space|a Vercel app linked to a Git repository with its framework settings|name:str:Project name;framework:str:Framework preset, e.g. nextjs
domain|infra|a custom hostname assigned to a Vercel project with automatic TLS|name:str:Domain name, e.g. app.example.com
environment_variable|infra|a Vercel secret or setting exposed to builds and functions per environment|key:str:Variable name;target:str:production, preview or development
"""),
    "bamboohr": ("BambooHR", """
employee|person|a BambooHR personnel record with job title, department and manager|first_name:str:Given name;department:str:Department, e.g. Finance
time_off_request|money|a BambooHR request for vacation or sick leave awaiting a manager|employee_id:str:Employee asking for leave;dates:str:Date range, e.g. 2024-07-01..2024-07-05
onboarding_checklist|doc|a BambooHR list of tasks a new hire completes in the first weeks|name:str:Checklist name
"""),
    "greenhouse": ("Greenhouse", """
candidate|person|a Greenhouse applicant with resume, applications and scorecards|first_name:str:Given name;email:str:Candidate email
job_posting|doc|a Greenhouse public job ad listed on the careers page|title:str:Job title;location:str:Office or Remote
interview|event|a Greenhouse scheduled conversation between a candidate and interviewers|application_id:str:Application being interviewed;start:str:Start in ISO 8601
offer|money|a Greenhouse employment offer with salary and start date that needs sign-off|application_id:str:Application the offer is for;salary:int:Yearly salary
"""),
    "docusign": ("DocuSign", """
envelope|msg|a DocuSign package of documents sent to recipients for electronic signature|email_subject:str:Subject of the signing email;signer_email:str:First signer
envelope_template|doc|a DocuSign reusable set of documents, fields and signer roles|name:str:Template name
signing_group|person|a DocuSign set of people any one of whom may sign for the group|group_name:str:Group name
"""),
}

# The actions each kind of object supports. Every kind has the common ones.
COMMON = ["create", "get", "list", "update", "delete", "search", "export", "watch", "audit", "count"]
KIND_ACTIONS: dict[str, list[str]] = {
    "item": ["archive", "restore", "assign", "close", "reopen", "comment_on", "label", "move", "duplicate", "summarize", "pin"],
    "doc": ["archive", "restore", "share", "comment_on", "label", "move", "duplicate", "rename", "lock", "unlock", "publish", "summarize", "pin", "import", "sync"],
    "msg": ["archive", "restore", "label", "pin", "summarize", "send", "schedule"],
    "infra": ["rename", "duplicate", "lock", "unlock", "sync", "import", "backup", "restore", "label"],
    "person": ["archive", "restore", "label", "import", "merge", "summarize", "assign"],
    "space": ["archive", "restore", "share", "rename", "transfer", "lock", "unlock", "pin", "duplicate", "summarize", "move", "label"],
    "money": ["approve", "reject", "cancel", "archive", "label", "comment_on", "summarize", "import", "send", "duplicate"],
    "event": ["schedule", "cancel", "close", "reopen", "assign", "comment_on", "summarize", "label"],
    "job": ["cancel", "retry", "approve", "reject", "schedule", "summarize", "label"],
}
PLURAL_ACTIONS = {"list", "search", "export", "import", "count"}  # named after the plural object

# action -> (sentence, parameters). In the sentence {a} is "a Slack channel",
# {obj} "Slack channel", {objs} "Slack channels". A parameter is
# (name, type, description, default); default REQUIRED makes it required;
# the names "@id" (the object's ID) and "@attrs"/"@attr0" (its create
# attributes) are expanded per object.
REQUIRED = object()
ACTIONS: dict[str, tuple[str, list[tuple]]] = {
    "create": ("Create a new {obj} and return its ID so later calls can reference it.", [("@attrs",)]),
    "get": ("Fetch a single {obj} by its ID, including every field and its current status.", [("@id",)]),
    "list": ("List {objs} page by page, most recently updated first.", [
        ("page_size", int, "How many {objs} to return per page (1-100)", 25),
        ("page_token", str, "Opaque token from the previous page; empty for the first page", ""),
        ("updated_since", str, "Only list {objs} updated after this ISO 8601 timestamp; empty for all", ""),
    ]),
    "update": ("Update fields of an existing {obj}; fields you omit keep their current values.", [("@id",), ("@attr0",)]),
    "delete": ("Permanently delete {a}. This cannot be undone.", [
        ("@id",),
        ("confirm", bool, "Must be true, as a safeguard against deleting the {obj} by accident", False),
    ]),
    "search": ("Full-text search across {objs} by keyword and return the closest matches.", [
        ("query", str, "Keywords to look for in {objs}", REQUIRED),
        ("limit", int, "Maximum number of matches", 20),
        ("include_archived", bool, "Also search archived {objs}", False),
    ]),
    "export": ("Export {objs} to a downloadable CSV or JSON file for reporting.", [
        ("format", str, "csv or json", "csv"),
        ("since", str, "Only export {objs} changed after this ISO 8601 timestamp; empty for all", ""),
    ]),
    "watch": ("Subscribe a webhook to change events on {a} so you hear about edits as they happen.", [
        ("@id",),
        ("webhook_url", str, "HTTPS URL that receives a POST for each change to the {obj}", REQUIRED),
    ]),
    "audit": ("Show the audit trail of {a}: who changed what, and when.", [
        ("@id",),
        ("since", str, "Only show changes after this ISO 8601 timestamp; empty for the full history", ""),
    ]),
    "count": ("Count {objs} matching a filter expression without fetching them.", [
        ("filter", str, "Filter expression, e.g. status:open; empty counts every {obj}", ""),
    ]),
    "archive": ("Archive {a} so it disappears from active views but stays read-only for compliance.", [
        ("@id",),
        ("reason", str, "Why the {obj} is archived; recorded in the audit log", ""),
    ]),
    "restore": ("Restore {a} from the archive, trash or a backup, bringing it back into active use.", [("@id",)]),
    "assign": ("Assign {a} to a teammate, who becomes its owner and is notified.", [
        ("@id",),
        ("assignee_email", str, "Email of the person who will own the {obj}", REQUIRED),
    ]),
    "close": ("Close {a} once the work on it is done, recording how it was resolved.", [
        ("@id",),
        ("resolution", str, "How the {obj} was resolved, e.g. fixed, duplicate, won't do", "done"),
    ]),
    "reopen": ("Reopen a closed {obj} because more work turned out to be needed.", [
        ("@id",),
        ("reason", str, "Why the {obj} needs more work", ""),
    ]),
    "comment_on": ("Add a comment to {a}; everyone following it is notified.", [
        ("@id",),
        ("comment", str, "Comment text, Markdown allowed", REQUIRED),
    ]),
    "label": ("Attach labels to {a} so it can be filtered and grouped.", [
        ("@id",),
        ("labels", str, "Comma-separated label names to add to the {obj}", REQUIRED),
    ]),
    "move": ("Move {a} under a different parent, keeping its history and links.", [
        ("@id",),
        ("destination_id", str, "ID of the new parent of the {obj}", REQUIRED),
    ]),
    "duplicate": ("Clone {a} into an independent copy with a new name.", [
        ("@id",),
        ("new_name", str, "Name of the copy", REQUIRED),
    ]),
    "summarize": ("Summarize the recent activity on {a} in a few plain-language sentences.", [
        ("@id",),
        ("max_sentences", int, "Upper bound on the length of the summary", 3),
    ]),
    "pin": ("Pin {a} to the top of lists so the whole team sees it first.", [("@id",)]),
    "share": ("Share {a} with a person by email and choose what they are allowed to do.", [
        ("@id",),
        ("email", str, "Who to share the {obj} with", REQUIRED),
        ("role", str, "viewer, commenter or editor", "viewer"),
    ]),
    "rename": ("Rename {a}; existing links and references keep working.", [
        ("@id",),
        ("new_name", str, "The new name of the {obj}", REQUIRED),
    ]),
    "lock": ("Lock {a} to block further changes until someone unlocks it.", [
        ("@id",),
        ("reason", str, "Why the {obj} is locked, shown to people who try to edit it", ""),
    ]),
    "unlock": ("Unlock a locked {obj} so it can be changed again.", [("@id",)]),
    "publish": ("Publish a draft {obj} so everyone with access can see it.", [
        ("@id",),
        ("notify_followers", bool, "Whether followers get a notification about the published {obj}", True),
    ]),
    "import": ("Bulk-import {objs} from a CSV or JSON file at a URL, skipping duplicates.", [
        ("file_url", str, "HTTPS URL of the file with one {obj} per row or element", REQUIRED),
        ("skip_duplicates", bool, "Leave existing {objs} untouched instead of overwriting them", True),
    ]),
    "sync": ("Force {a} to re-sync with its upstream source and pick up recent changes.", [
        ("@id",),
        ("full_resync", bool, "Re-read everything instead of only what changed since the last sync", False),
    ]),
    "send": ("Send {a} to its recipients right away.", [
        ("@id",),
        ("recipients", str, "Comma-separated addresses that override the saved recipients; empty keeps them", ""),
    ]),
    "schedule": ("Schedule {a} for a specific future date and time.", [
        ("@id",),
        ("scheduled_for", str, "When, in ISO 8601, e.g. 2025-03-01T09:00:00", REQUIRED),
        ("timezone", str, "IANA time zone the time is in", "UTC"),
    ]),
    "backup": ("Take a point-in-time backup of {a} and keep it for a retention period.", [
        ("@id",),
        ("retention_days", int, "How many days to keep the backup of the {obj}", 30),
    ]),
    "merge": ("Merge a duplicate {obj} into another, combining their history and references.", [
        ("@id",),
        ("duplicate_id", str, "ID of the duplicate {obj}, which is removed after the merge", REQUIRED),
    ]),
    "transfer": ("Transfer ownership of {a} to another user, who gets full control of it.", [
        ("@id",),
        ("new_owner_email", str, "Email of the new owner of the {obj}", REQUIRED),
    ]),
    "approve": ("Approve a pending {obj} and notify whoever requested it.", [
        ("@id",),
        ("note", str, "Optional note for the requester", ""),
    ]),
    "reject": ("Reject a pending {obj} with a reason that is sent back to the requester.", [
        ("@id",),
        ("reason", str, "Why the {obj} is rejected", REQUIRED),
    ]),
    "cancel": ("Cancel {a} before it completes; nothing further happens for it.", [
        ("@id",),
        ("reason", str, "Why the {obj} is cancelled", ""),
    ]),
    "retry": ("Retry a failed {obj} with the same inputs and settings.", [("@id",)]),
}

# Appended to descriptions when COUNT exceeds the distinct combinations.
QUALIFIERS = [
    "EU-West data region", "US-East data region", "APAC data region", "Canada data region",
    "finance team", "support team", "platform engineering team", "marketing team",
    "sales operations team", "security team", "legal team", "people operations team",
]
TYPES = {"str": str, "int": int, "bool": bool}


def article(phrase: str) -> str:
    word = phrase.split()[0]
    if len(word) > 1 and word[:2].isupper():  # an acronym is read letter by letter: "an S3", "an AWS"
        return "an" if word[0] in "AEFHILMNORSX" else "a"
    return "an" if word[0].lower() in "aeiou" else "a"


def plural(noun: str) -> str:
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def parse_objects(block: str) -> list[dict]:
    objects = []
    for line in block.strip().splitlines():
        key, kind, gloss, attrs = line.split("|")
        objects.append({
            "key": key,
            "kind": kind,
            "gloss": gloss,
            "attrs": [tuple(a.split(":", 2)) for a in attrs.split(";")],
        })
    return objects


def combos() -> list[dict]:
    """Every distinct (service, object, action) tool, ordered so that any
    prefix spreads over all services and actions: round-robin over the
    services, each service's tools in a fixed hash order."""
    per_service = []
    for svc, (display, block) in SERVICES.items():
        tools = []
        for obj in parse_objects(block):
            for action in COMMON + KIND_ACTIONS[obj["kind"]]:
                tools.append(make_spec(svc, display, obj, action))
        tools.sort(key=lambda t: hashlib.sha256(t["name"].encode()).hexdigest())
        per_service.append(tools)
    ordered = []
    for i in range(max(len(t) for t in per_service)):
        ordered += [tools[i] for tools in per_service if i < len(tools)]
    return ordered


def make_spec(svc: str, display: str, obj: dict, action: str) -> dict:
    noun = obj["key"].replace("_", " ")
    nouns = plural(noun)
    one = f"{display} {noun}"
    words = {"a": f"{article(one)} {one}", "obj": one, "objs": f"{display} {nouns}"}
    name = f"{svc}_{action}_{plural(obj['key']) if action in PLURAL_ACTIONS else obj['key']}"
    sentence, param_specs = ACTIONS[action]
    gloss = f"{article(one).capitalize()} {one} is {obj['gloss']}."
    params = []  # (name, type, description, default)
    for spec in param_specs:
        if spec[0] == "@id":
            params.append((f"{obj['key']}_id", str, f"ID of the {one}", REQUIRED))
        elif spec[0] in ("@attrs", "@attr0"):
            attrs = obj["attrs"] if spec[0] == "@attrs" else obj["attrs"][:1]
            for n, (pname, ptype, pdesc) in enumerate(attrs):
                # create: the first attribute is required; update: all are optional.
                required = spec[0] == "@attrs" and n == 0
                default = REQUIRED if required else {"str": "", "int": 0, "bool": False}[ptype]
                params.append((pname, TYPES[ptype], pdesc, default))
        else:
            pname, ptype, pdesc, default = spec
            params.append((pname, ptype, pdesc.format(**words), default))
    seen: set[str] = set()  # e.g. BigQuery's table_id is both the ID and a create attribute
    params = [p for p in params if not (p[0] in seen or seen.add(p[0]))]
    return {
        "name": name,
        "description": f"{sentence.format(**words)} {gloss}",
        "params": params[:3],
    }


def catalog(count: int) -> list[dict]:
    base = combos()
    names = [t["name"] for t in base]
    if len(set(names)) != len(names):
        raise RuntimeError("duplicate tool names in the vocabulary")
    out = []
    for i in range(count):
        spec, rnd = base[i % len(base)], i // len(base)
        if rnd:
            where = QUALIFIERS[(rnd - 1) % len(QUALIFIERS)]
            cycle = (rnd - 1) // len(QUALIFIERS)
            where += f" (partition {cycle + 1})" if cycle else ""
            spec = dict(spec, name=f"{spec['name']}_{rnd + 1}", description=f"{spec['description']} Scoped to the {where}.")
        out.append(spec)
    return out


def reply(name: str):
    async def call(**arguments) -> str:
        return json.dumps({"tool": name, "arguments": arguments}, sort_keys=True)

    call.__name__ = name  # MCPServer titles the input schema f"{__name__}Arguments"
    return call


def with_signature(fn, params: list[tuple]):
    """Give `fn` the signature MCPServer derives the input schema and the
    argument validation from: keyword parameters typed and described."""
    fn.__signature__ = inspect.Signature([
        inspect.Parameter(
            pname,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[ptype, Field(description=pdesc)] if pdesc else ptype,
            default=inspect.Parameter.empty if default is REQUIRED else default,
        )
        for pname, ptype, pdesc, default in params
    ])
    return fn


def generated_tools(count: int) -> list[Tool]:
    """The catalog as SDK tools, the same as MCPServer.add_tool would make
    them but about twice as fast: the SDK builds one Tool (pydantic argument
    model and input schema) per distinct parameter list (names, types,
    defaults) and each tool of that shape gets a copy with its own name,
    description, function and parameter descriptions."""
    by_shape: dict[tuple, Tool] = {}
    tools = []
    for spec in catalog(count):
        name, params = spec["name"], spec["params"]
        shape = tuple((pname, ptype, default) for pname, ptype, _, default in params)
        base = by_shape.get(shape)
        if base is None:
            fn = with_signature(reply("tool"), [(pname, ptype, None, default) for pname, ptype, default in shape])
            base = by_shape[shape] = Tool.from_function(fn, name="tool", description="", structured_output=False)
        schema = copy.deepcopy(base.parameters)
        schema["title"] = f"{name}Arguments"
        for pname, _, pdesc, _ in params:  # pydantic's key order: default, description, title, type
            schema["properties"][pname] = dict(sorted({**schema["properties"][pname], "description": pdesc}.items()))
        tools.append(base.model_copy(update={"fn": reply(name), "name": name, "description": spec["description"], "parameters": schema}))
    return tools


def build_server(count: int) -> MCPServer:
    app = MCPServer("many-tools", version="1.0.0", log_level="WARNING", tools=generated_tools(count))

    @app.tool(structured_output=False)
    async def add_tool(ctx: Context, name: str, description: str) -> str:
        """Register a new tool called `name` with `description` and notify tools/list_changed."""
        if app._tool_manager.get_tool(name) is not None:
            raise ToolError(f"tool {name!r} already exists")
        app.add_tool(with_signature(reply(name), []), name=name, description=description, structured_output=False)
        # Handshake-era sessions: a notification on this connection, on the
        # stream of this request. 2026-07-28 sessions: subscriptions/listen.
        await ctx.session.send_notification(
            types.ToolListChangedNotification(), related_request_id=ctx.request_context.request_id
        )
        await ctx.notify_tools_changed()
        return json.dumps({"added": name})

    return app


async def serve(app: MCPServer) -> None:
    # MCPServer.run_stdio_async() advertises tools.listChanged=false.
    low = app._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        await low.run(read_stream, write_stream, low.create_initialization_options(NotificationOptions(tools_changed=True)))


def main() -> None:
    try:
        count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
        if count < 0 or len(sys.argv) > 2:
            raise ValueError
    except ValueError:
        print("usage: many_tools_server.py [COUNT]", file=sys.stderr)
        sys.exit(2)
    anyio.run(serve, build_server(count))


if __name__ == "__main__":
    main()
