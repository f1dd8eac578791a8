//! Adaptive broker protection, the pure parts: the controller that moves an admission limit
//! below the configured budgets from Kafka's own signals ([`controller`]), the path's latency
//! baseline it judges them against ([`baseline`]), how that limit is
//! shared among priority classes and tenants ([`crate::allocation`]), and the plan admission reads
//! ([`Plan`]). The agent that feeds the controller lives in `adaptive_agent`.
//!
//! Layer: configuration (budget specs, the priority classes, `agent`'s plan cell); no runtime.

pub mod baseline;
pub mod controller;

use std::collections::HashMap;

use crate::budget::BudgetSpec;
use crate::config::Priority;

/// One tenant's part of the adaptive limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Allotment {
    pub class: Priority,
    /// Its share as a budget: what admission enforces.
    pub spec: BudgetSpec,
    /// Its weight's part of its class (what it would get asking for its configured rate), per
    /// second in each dimension the ceiling counts: a refusal names the wait against this (an
    /// optimistic one, at least the time to the next plan).
    pub claimed: (Option<u64>, Option<u64>),
}

/// What admission enforces now: per tenant, its share of the adaptive limit as a budget.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// False while the limit is at its ceiling: then the configured budgets alone decide.
    pub active: bool,
    /// Changes with every plan, so a tenant's bucket knows to follow.
    pub epoch: u64,
    /// When the next plan is due (the agent's clock, ns): a share cannot change before.
    pub next_ns: u64,
    pub shares: HashMap<String, Allotment>,
}

/// The current plan: swapped whole by the agent, read lock-free by admission.
pub type PlanCell = crate::agent::PlanCell<Plan>;
