//! Where a new call goes, decided from the registry as last read (no database on the way): this
//! instance when it takes calls, else the least loaded other instance that is ready, has room
//! and heartbeated recently. Pure: the registry rows, this instance's own state and the
//! placements made since the rows were read come in, a decision comes out.

use std::collections::HashMap;

use crate::store::instances::InstanceRow;

/// A placement decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// This instance takes the call.
    Here,
    /// Another instance: its id and advertised URL.
    There { id: String, url: String },
    /// No instance is ready with room.
    Nowhere,
}

/// Chooses an instance for a new call. `here_ready`: this instance (`me`) takes calls now (not
/// draining, not full; its own count is fresher than its row). `placed` counts the calls sent
/// to each other instance since `rows` were read, so a burst is spread rather than sent to
/// the one that looked emptiest.
pub fn place(
    me: &str,
    here_ready: bool,
    rows: &[InstanceRow],
    stale_after_ms: i64,
    placed: &HashMap<String, i64>,
) -> Place {
    if here_ready {
        return Place::Here;
    }
    rows.iter()
        .filter(|r| r.id != me && r.state == "ready" && r.heartbeat_age_ms <= stale_after_ms)
        .map(|r| (r, r.active_calls + placed.get(&r.id).copied().unwrap_or(0)))
        .filter(|(r, load)| *load < r.capacity)
        .min_by(|(a, la), (b, lb)| {
            // Lowest share of capacity in use, then fewest calls, then by name (deterministic).
            let (fa, fb) = (
                *la as f64 / a.capacity as f64,
                *lb as f64 / b.capacity as f64,
            );
            fa.total_cmp(&fb).then(la.cmp(lb)).then(a.id.cmp(&b.id))
        })
        .map_or(Place::Nowhere, |(r, _)| Place::There {
            id: r.id.clone(),
            url: r.url.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, state: &str, active: i64, capacity: i64, age: i64) -> InstanceRow {
        InstanceRow {
            id: id.into(),
            url: format!("http://{id}"),
            capacity,
            active_calls: active,
            state: state.into(),
            started_at: 0,
            heartbeat_at: 0,
            heartbeat_age_ms: age,
        }
    }

    fn there(id: &str) -> Place {
        Place::There {
            id: id.into(),
            url: format!("http://{id}"),
        }
    }

    #[test]
    fn itself_first_then_the_least_loaded_ready_instance_with_room() {
        let rows = vec![
            row("a", "ready", 9, 10, 100),
            row("b", "ready", 5, 10, 100),
            row("c", "ready", 30, 100, 100),
            row("d", "draining", 0, 10, 100),
            row("e", "ready", 0, 10, 60_000),
            row("f", "full", 10, 10, 100),
            row("g", "gone", 0, 10, 100),
        ];
        let none = HashMap::new();
        assert_eq!(place("a", true, &rows, 5000, &none), Place::Here);
        // c has 30 % in use, b 50 %: c. Draining, stale, full and gone ones never.
        assert_eq!(place("a", false, &rows, 5000, &none), there("c"));
        let placed = HashMap::from([("c".to_owned(), 40)]);
        assert_eq!(place("a", false, &rows, 5000, &placed), there("b"));
        let placed = HashMap::from([("c".to_owned(), 70), ("b".to_owned(), 5)]);
        assert_eq!(place("a", false, &rows, 5000, &placed), Place::Nowhere);
        assert_eq!(place("a", false, &[], 5000, &none), Place::Nowhere);
    }

    #[test]
    fn ties_go_to_fewer_calls_then_by_name() {
        let rows = vec![
            row("y", "ready", 2, 10, 0),
            row("x", "ready", 2, 10, 0),
            row("z", "ready", 4, 20, 0),
        ];
        assert_eq!(place("me", false, &rows, 5000, &HashMap::new()), there("x"));
    }
}
