//! Seed 002's MCP server: the telecom support desk's tools in its three domains — CRM & billing,
//! products & promotions, security & authentication — built on rmcp's server side, with one
//! small in-memory customer base shared by every session (paying an invoice, changing a plan,
//! unlocking an account and opening a ticket change it). `baton demo --scenario seed002` starts it
//! beside the mock model: in process over a pipe when accelerated, over Streamable HTTP on
//! loopback at real pace; `baton mock-mcp` serves it on its own (HTTP or stdio).
//!
//! Tools answer with structured content (and the same JSON as text); an unknown customer or
//! invoice is an error result the agent can say something about.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// The name the seed 002 agent set gives this server (`mcp = { support = [...] }`).
pub const SERVER_NAME: &str = "support";

/// The customer base the tools read and change.
#[derive(Debug)]
struct Desk {
    customers: BTreeMap<i64, Customer>,
    next_ticket: i64,
}

#[derive(Clone, Debug)]
struct Customer {
    name: &'static str,
    plan: String,
    locked: bool,
    failed_logins: u32,
    invoices: Vec<Invoice>,
    tickets: Vec<Value>,
    used_gb: f64,
}

#[derive(Clone, Debug)]
struct Invoice {
    id: i64,
    amount_usd: f64,
    paid: bool,
    lines: Vec<(&'static str, f64)>,
}

impl Desk {
    fn new() -> Desk {
        let mut customers = BTreeMap::new();
        customers.insert(
            251,
            Customer {
                name: "Jordan Lee",
                plan: "Pro 20GB".into(),
                locked: true,
                failed_logins: 5,
                invoices: vec![Invoice {
                    id: 9001,
                    amount_usd: 60.99,
                    paid: false,
                    lines: vec![("Pro 20GB monthly", 45.99), ("One-time setup fee", 15.0)],
                }],
                tickets: Vec::new(),
                used_gb: 12.4,
            },
        );
        customers.insert(
            252,
            Customer {
                name: "Sam Rivera",
                plan: "Max Unlimited".into(),
                locked: false,
                failed_logins: 0,
                invoices: vec![Invoice {
                    id: 9002,
                    amount_usd: 60.0,
                    paid: true,
                    lines: vec![("Max Unlimited monthly", 60.0)],
                }],
                tickets: Vec::new(),
                used_gb: 41.0,
            },
        );
        Desk {
            customers,
            next_ticket: 4411,
        }
    }
}

const PRODUCTS: &[(&str, f64, &str)] = &[
    ("Pro 20GB", 45.99, "20 GB of data, unlimited calls"),
    ("Max Unlimited", 60.0, "Unlimited data, 5G"),
    ("Family 4 lines", 120.0, "Four lines sharing 100 GB"),
];

const PROMOTIONS: &[(&str, &str, &[&str])] = &[
    (
        "PREMIUM20",
        "20% off Max Unlimited this month",
        &["Pro 20GB", "Max Unlimited"],
    ),
    ("DOUBLEDATA", "Double data for 3 months", &["Pro 20GB"]),
    ("FAMILY10", "10% off Family plans", &["Family 4 lines"]),
];

const ARTICLES: &[(&str, &str)] = &[
    ("How to read your bill", "billing"),
    ("Why a setup fee appears on a first bill", "billing"),
    ("Choosing a plan", "products"),
    ("Unlocking your account", "security"),
    ("Spotting phishing messages", "security"),
];

/// The seed 002 server: its tools over one shared customer base.
#[derive(Clone)]
pub struct SupportDesk {
    desk: Arc<Mutex<Desk>>,
}

impl Default for SupportDesk {
    fn default() -> Self {
        SupportDesk {
            desk: Arc::new(Mutex::new(Desk::new())),
        }
    }
}

fn schema(props: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let v = json!({"type": "object", "properties": props, "required": required});
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn customer_id() -> Value {
    json!({"customer_id": {"type": "integer", "description": "The customer's id, e.g. 251"}})
}

/// Every tool of the three domains, with its description and input schema.
pub fn tools() -> Vec<Tool> {
    let id_only = || schema(customer_id(), &["customer_id"]);
    let t = |name: &'static str, desc: &'static str, s: Arc<Map<String, Value>>| {
        Tool::new(name, desc, s)
    };
    vec![
        // CRM & billing
        t(
            "get_all_customers",
            "List every customer: id and name.",
            schema(json!({}), &[]),
        ),
        t(
            "get_customer_detail",
            "Look up a customer by id: name, plan and status.",
            id_only(),
        ),
        t(
            "get_subscription_detail",
            "A customer's subscription: plan, renewal date, monthly price.",
            id_only(),
        ),
        t(
            "get_billing_summary",
            "The customer's current bill, its lines and the balance due.",
            id_only(),
        ),
        t(
            "get_invoice_payments",
            "Payments made against an invoice.",
            schema(json!({"invoice_id": {"type": "integer"}}), &["invoice_id"]),
        ),
        t(
            "pay_invoice",
            "Pay an invoice with the card on file.",
            schema(
                json!({"invoice_id": {"type": "integer"}, "amount_usd": {"type": "number", "minimum": 0}}),
                &["invoice_id", "amount_usd"],
            ),
        ),
        t("get_data_usage", "Data used this month.", id_only()),
        t(
            "update_subscription",
            "Change a customer's plan.",
            schema(
                json!({"customer_id": {"type": "integer"}, "plan": {"type": "string", "enum": PRODUCTS.iter().map(|p| p.0).collect::<Vec<_>>()}}),
                &["customer_id", "plan"],
            ),
        ),
        t(
            "search_knowledge_base",
            "Search help articles.",
            schema(json!({"query": {"type": "string"}}), &["query"]),
        ),
        // Products & promotions
        t(
            "get_products",
            "Products and plans on sale.",
            schema(json!({}), &[]),
        ),
        t(
            "get_product_detail",
            "Details of one product.",
            schema(json!({"product": {"type": "string"}}), &["product"]),
        ),
        t(
            "get_promotions",
            "Current promotions.",
            schema(json!({}), &[]),
        ),
        t(
            "get_eligible_promotions",
            "Promotions this customer is eligible for.",
            id_only(),
        ),
        t("get_customer_orders", "The customer's orders.", id_only()),
        // Security & authentication
        t(
            "get_security_logs",
            "Recent sign-in attempts on the account and whether it is locked.",
            id_only(),
        ),
        t(
            "unlock_account",
            "Unlock a verified customer's account.",
            id_only(),
        ),
        t(
            "get_support_tickets",
            "The customer's support tickets.",
            id_only(),
        ),
        t(
            "create_support_ticket",
            "Open a support ticket.",
            schema(
                json!({"customer_id": {"type": "integer"}, "summary": {"type": "string"}}),
                &["customer_id", "summary"],
            ),
        ),
    ]
}

impl SupportDesk {
    /// Runs one tool; `Err` is an error result's message.
    fn run(&self, name: &str, args: &Map<String, Value>) -> Result<Value, String> {
        let mut desk = self.desk.lock().map_err(|_| "the desk is unavailable")?;
        let int = |k: &str| {
            args.get(k)
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("argument '{k}' (an integer) is required"))
        };
        let text = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("argument '{k}' (a string) is required"))
        };
        let invoice_of = |desk: &Desk, id: i64| {
            desk.customers
                .iter()
                .find_map(|(cid, c)| {
                    c.invoices
                        .iter()
                        .find(|i| i.id == id)
                        .map(|i| (*cid, i.clone()))
                })
                .ok_or_else(|| format!("no invoice {id}"))
        };
        if name == "get_all_customers" {
            let list: Vec<Value> = desk
                .customers
                .iter()
                .map(|(id, c)| json!({"customer_id": id, "name": c.name}))
                .collect();
            return Ok(json!({"customers": list}));
        }
        if let Some(v) = catalog(name, args) {
            return v;
        }
        if matches!(name, "get_invoice_payments" | "pay_invoice") {
            let id = int("invoice_id")?;
            let (cid, inv) = invoice_of(&desk, id)?;
            if name == "get_invoice_payments" {
                let payments: Vec<Value> = if inv.paid {
                    vec![json!({"amount_usd": inv.amount_usd, "paid_on": "2026-11-03"})]
                } else {
                    Vec::new()
                };
                return Ok(json!({"invoice_id": id, "payments": payments}));
            }
            let amount = args
                .get("amount_usd")
                .and_then(Value::as_f64)
                .unwrap_or(0.0);
            if inv.paid {
                return Err(format!("invoice {id} is already paid"));
            }
            if (amount - inv.amount_usd).abs() > 0.005 {
                return Err(format!(
                    "invoice {id} is for {:.2} USD, not {amount:.2}",
                    inv.amount_usd
                ));
            }
            if let Some(i) = desk
                .customers
                .get_mut(&cid)
                .and_then(|c| c.invoices.iter_mut().find(|i| i.id == id))
            {
                i.paid = true;
            }
            return Ok(json!({"invoice_id": id, "status": "paid", "amount_usd": amount}));
        }
        let cid = int("customer_id")?;
        let next_ticket = desk.next_ticket;
        let c = desk
            .customers
            .get_mut(&cid)
            .ok_or_else(|| format!("no customer with id {cid}"))?;
        let due: f64 = c
            .invoices
            .iter()
            .filter(|i| !i.paid)
            .map(|i| i.amount_usd)
            .sum();
        Ok(match name {
            "get_customer_detail" => json!({
                "customer_id": cid, "name": c.name, "plan": c.plan,
                "status": if c.locked { "locked" } else { "active" }
            }),
            "get_subscription_detail" => {
                let price = PRODUCTS.iter().find(|p| p.0 == c.plan).map_or(0.0, |p| p.1);
                json!({"plan": c.plan, "renews_on": "2026-12-01", "monthly_usd": price})
            }
            "get_billing_summary" => {
                let current = c.invoices.last();
                json!({
                    "customer_id": cid,
                    "current_bill_usd": current.map_or(0.0, |i| i.amount_usd),
                    "invoice_id": current.map(|i| i.id),
                    "lines": current.map(|i| i.lines.iter().map(|(what, usd)| json!({"item": what, "usd": usd})).collect::<Vec<_>>()),
                    "balance_due_usd": due,
                    "due_on": "2026-12-05"
                })
            }
            "get_data_usage" => json!({"used_gb": c.used_gb, "plan": c.plan}),
            "update_subscription" => {
                let plan = text("plan")?;
                if !PRODUCTS.iter().any(|p| p.0 == plan) {
                    return Err(format!("no plan named {plan:?}"));
                }
                c.plan = plan.clone();
                json!({"customer_id": cid, "plan": plan, "status": "updated"})
            }
            "get_eligible_promotions" => {
                let eligible: Vec<Value> = PROMOTIONS
                    .iter()
                    .filter(|p| p.2.contains(&c.plan.as_str()))
                    .map(|p| json!({"code": p.0, "offer": p.1}))
                    .collect();
                json!({"customer_id": cid, "eligible": eligible})
            }
            "get_customer_orders" => {
                json!({"orders": [{"id": 7001, "item": "Phone case", "status": "shipped"}]})
            }
            "get_security_logs" => json!({
                "customer_id": cid, "failed_logins": c.failed_logins,
                "last_attempt": "2026-11-20T09:12:00Z", "locked": c.locked
            }),
            "unlock_account" => {
                let was = c.locked;
                c.locked = false;
                c.failed_logins = 0;
                json!({"customer_id": cid, "status": if was { "unlocked" } else { "was not locked" }})
            }
            "get_support_tickets" => json!({"tickets": c.tickets}),
            "create_support_ticket" => {
                let summary = text("summary")?;
                let ticket =
                    json!({"ticket_id": next_ticket, "summary": summary, "status": "open"});
                c.tickets.push(ticket.clone());
                desk.next_ticket += 1;
                ticket
            }
            other => return Err(format!("no tool named {other:?}")),
        })
    }
}

/// The tools that read only the product catalog and help articles.
fn catalog(name: &str, args: &Map<String, Value>) -> Option<Result<Value, String>> {
    Some(Ok(match name {
        "get_products" => {
            json!({"products": PRODUCTS.iter().map(|p| json!({"name": p.0, "monthly_usd": p.1})).collect::<Vec<_>>()})
        }
        "get_product_detail" => {
            let want = args.get("product").and_then(Value::as_str).unwrap_or("");
            return Some(
                PRODUCTS
                    .iter()
                    .find(|p| p.0.eq_ignore_ascii_case(want))
                    .map(|p| json!({"name": p.0, "monthly_usd": p.1, "about": p.2}))
                    .ok_or_else(|| format!("no product named {want:?}")),
            );
        }
        "get_promotions" => {
            json!({"promotions": PROMOTIONS.iter().map(|p| json!({"code": p.0, "offer": p.1})).collect::<Vec<_>>()})
        }
        "search_knowledge_base" => {
            let q = args
                .get("query")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_lowercase();
            let hits: Vec<&str> = ARTICLES
                .iter()
                .filter(|(title, topic)| {
                    q.split_whitespace()
                        .any(|w| title.to_lowercase().contains(w) || topic.contains(w))
                })
                .map(|a| a.0)
                .collect();
            json!({"articles": hits})
        }
        _ => return None,
    }))
}

impl rmcp::ServerHandler for SupportDesk {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "Seed 002's support desk: CRM & billing, products & promotions, security tools.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !tools().iter().any(|t| t.name == request.name) {
            return Err(ErrorData::invalid_params(
                format!("no tool named {:?}", request.name),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        let result = match self.run(&request.name, &args) {
            Ok(v) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
                r.structured_content = Some(v);
                r
            }
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// This server's tools as an offline catalog (declared, not callable): for checking the seed 002
/// set's declarations without running the server.
pub fn offline_catalog() -> Arc<crate::mcp::Catalog> {
    crate::mcp::Catalog::offline(SERVER_NAME, tools())
}

/// The server on a byte stream (the other end is an MCP client): served until the stream closes.
pub fn serve_stream<S>(desk: SupportDesk, io: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    tokio::spawn(async move {
        use rmcp::ServiceExt;
        let (r, w) = tokio::io::split(io);
        if let Ok(running) = desk.serve((r, w)).await {
            let _ = running.waiting().await;
        }
    });
}

/// A connector for [`crate::mcp::Hub`]: each connect gets a fresh in-process pipe to `desk`.
pub fn in_process(desk: SupportDesk) -> crate::mcp::hub::Connector {
    crate::mcp::hub::Connector::InProcess(Arc::new(move || {
        let (client, server) = tokio::io::duplex(64 * 1024);
        serve_stream(desk.clone(), server);
        client
    }))
}

/// The server over Streamable HTTP at `http://<addr>/mcp`, until `stop`.
pub async fn serve_http(
    desk: SupportDesk,
    addr: &str,
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let service: StreamableHttpService<SupportDesk, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(desk.clone()),
            Default::default(),
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
        );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr()?;
    // Each answer goes out at once: without TCP_NODELAY an SSE response's last write waits for
    // the client's delayed ACK (~40 ms).
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await;
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(d: &SupportDesk, name: &str, args: Value) -> Result<Value, String> {
        d.run(name, args.as_object().unwrap_or(&Map::new()))
    }

    #[test]
    fn the_desk_answers_and_changes() {
        let d = SupportDesk::default();
        let bill = call(&d, "get_billing_summary", json!({"customer_id": 251})).unwrap();
        assert_eq!(bill["current_bill_usd"], json!(60.99));
        assert_eq!(bill["balance_due_usd"], json!(60.99));
        assert!(
            call(
                &d,
                "pay_invoice",
                json!({"invoice_id": 9001, "amount_usd": 10})
            )
            .is_err()
        );
        call(
            &d,
            "pay_invoice",
            json!({"invoice_id": 9001, "amount_usd": 60.99}),
        )
        .unwrap();
        let bill = call(&d, "get_billing_summary", json!({"customer_id": 251})).unwrap();
        assert_eq!(bill["balance_due_usd"], json!(0.0));
        assert_eq!(
            call(&d, "get_security_logs", json!({"customer_id": 251})).unwrap()["locked"],
            json!(true)
        );
        call(&d, "unlock_account", json!({"customer_id": 251})).unwrap();
        assert_eq!(
            call(&d, "get_security_logs", json!({"customer_id": 251})).unwrap()["locked"],
            json!(false)
        );
        assert_eq!(
            call(&d, "get_customer_detail", json!({"customer_id": 9})),
            Err("no customer with id 9".into())
        );
        let promos = call(&d, "get_eligible_promotions", json!({"customer_id": 251})).unwrap();
        assert_eq!(promos["eligible"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn every_tool_schema_translates() {
        for t in tools() {
            let s = Value::Object((*t.input_schema).clone());
            crate::mcp::schema::translate(&s).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        }
    }
}
