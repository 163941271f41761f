"""Generated workplace memories for the search benchmark: a namespace tree with memories
spread unevenly over it, distinct natural-ish sentences, and questions about them.

Everything is drawn from templates and small vocabularies with a seeded RNG, so a given
seed always yields the same corpus. Questions are phrased as questions, never copies of
stored sentences.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import msgspec

PEOPLE = (
    "Priya",
    "Dana",
    "Ravi",
    "Mei",
    "Omar",
    "Lena",
    "Tom",
    "Aisha",
    "Jonas",
    "Sofia",
    "Kenji",
    "Marta",
    "Lucas",
    "Fatima",
    "Noah",
    "Elena",
    "Diego",
    "Hana",
    "Felix",
    "Grace",
    "Ivan",
    "Zara",
    "Mateo",
    "Chloe",
    "Arjun",
    "Nina",
    "Oscar",
    "Leila",
    "Ben",
    "Yuki",
    "Carlos",
    "Ingrid",
    "Samir",
    "Julia",
    "Kwame",
    "Anya",
    "Pedro",
    "Ruth",
    "Tariq",
    "Eva",
    "Hugo",
    "Amara",
    "Lars",
    "Nadia",
    "Victor",
    "Sara",
    "Emil",
    "Rosa",
)
PLACES = (
    "Lisbon",
    "Berlin",
    "Toronto",
    "Nairobi",
    "Osaka",
    "Austin",
    "Dublin",
    "Madrid",
    "Seoul",
    "Oslo",
    "Denver",
    "Warsaw",
    "Lagos",
    "Lyon",
    "Porto",
    "Boston",
    "Krakow",
    "Sydney",
    "Chicago",
    "Zurich",
    "Athens",
    "Prague",
    "Vienna",
    "Helsinki",
    "Montreal",
    "Singapore",
    "Bogota",
    "Cape Town",
    "Edinburgh",
    "Tallinn",
)
PROJECTS = (
    "Atlas",
    "Beacon",
    "Cobalt",
    "Delta",
    "Ember",
    "Falcon",
    "Granite",
    "Harbor",
    "Iris",
    "Juniper",
    "Kestrel",
    "Lumen",
    "Mosaic",
    "Nimbus",
    "Orchid",
    "Pioneer",
    "Quartz",
    "Raven",
    "Sequoia",
    "Tundra",
    "Umbra",
    "Vortex",
    "Willow",
    "Xenon",
    "Yarrow",
    "Zephyr",
    "Aurora",
    "Basalt",
    "Cedar",
    "Drift",
    "Echo",
    "Fjord",
    "Glacier",
    "Helix",
    "Indigo",
    "Jasper",
)
TOOLS = (
    "Postgres",
    "Kafka",
    "Terraform",
    "Grafana",
    "Kubernetes",
    "Redis",
    "Prometheus",
    "Airflow",
    "Snowflake",
    "Jenkins",
    "Sentry",
    "Datadog",
    "Elasticsearch",
    "RabbitMQ",
    "Vault",
    "Ansible",
    "Spark",
    "dbt",
    "Looker",
    "Tableau",
    "Jira",
    "Confluence",
    "GitLab",
    "Argo",
    "Istio",
    "Nginx",
    "ClickHouse",
    "MongoDB",
    "Salesforce",
    "Zendesk",
    "HubSpot",
    "Stripe",
    "Figma",
    "Notion",
)
TOPICS = (
    "billing migration",
    "on-call rotation",
    "quarterly review",
    "data retention policy",
    "incident postmortem",
    "load testing",
    "security audit",
    "onboarding checklist",
    "pricing update",
    "customer churn analysis",
    "release train",
    "disaster recovery drill",
    "schema change",
    "latency budget",
    "hiring plan",
    "vendor contract",
    "accessibility review",
    "cost report",
    "capacity forecast",
    "API deprecation",
    "search relevance work",
    "mobile launch",
    "support backlog",
    "invoice reconciliation",
    "partner integration",
    "compliance training",
    "feature flag cleanup",
    "dashboard redesign",
    "backup restore test",
    "SLA renegotiation",
)
FOODS = (
    "ramen",
    "falafel",
    "sushi",
    "tacos",
    "pho",
    "dumplings",
    "curry",
    "salad bowls",
    "pizza",
    "bagels",
    "shakshuka",
    "burritos",
)
COMPANIES = (
    "Initech",
    "Hooli",
    "Umbrella",
    "Stark Labs",
    "Wayne Systems",
    "Cyberdyne",
    "Soylent",
    "Vandelay",
    "Wonka Works",
    "Tyrell",
    "Gringotts",
    "Monarch",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
YEARS = ("2021", "2022", "2023", "2024", "2025")

Slots = dict[str, str]

SENTENCES = (
    "{person} moved the {project} {topic} to {weekday} {day} {month} because the {tool} upgrade slipped.",
    "The {project} team in {place} runs {tool} for the {topic} and sees about {n} requests per second.",
    "{person} owns the {topic} runbook for {project} and prefers {tool} over {tool2}.",
    "On {day} {month} {person} and {person2} met in {place} to review the {project} {topic}.",
    "{person} reported that {tool} latency on {project} rose to {n} ms after the {month} release.",
    "The {project} budget for the {topic} is {n} thousand euros until {month} {year}.",
    "{person} is flying to {place} on {weekday} {day} {month} for the {project} kickoff.",
    "{person} likes {tool} for the {topic}, and the {place} office adopted it in {year}.",
    "The {topic} review for {project} found {n} open issues, mostly in the {tool} integration.",
    "{person} will present the {project} {topic} results at the {place} all-hands on {weekday}.",
    "{project} keeps its {topic} data in {tool}; {person} expects {n} gigabytes by {month}.",
    "After the outage on {day} {month}, {person} added a {tool} alert for the {project} {topic}.",
    "{person} asked {person2} to move {project} from {tool} to {tool2} before {day} {month}.",
    "The {place} office has {n} engineers working on {project}, led by {person}.",
    "{person} usually orders {food} and books the {place} room for the {project} sync.",
    "{person} joined the {project} team in {month} {year} after {n} years at {company}.",
    "{person} approved {n} hours of overtime for the {project} {topic} in {place}.",
    "The {project} {topic} deadline is {weekday} {day} {month}, according to {person}.",
    "{person} fixed a {tool} bug that broke the {topic} for {project} users in {place}.",
    "{person} thinks {project} should drop {tool} because the {topic} cost grew {n} percent.",
    "{company} signed the {topic} contract with {project} after {person} visited {place} in {month}.",
    "{person} is on leave from {day} {month} to {weekday}; {person2} covers the {project} {topic}.",
    "The {project} dashboard in {tool} shows {n} failed jobs in the {topic} since {month}.",
    "{person} wrote the {project} design note on the {topic} while working from {place}.",
)

QUESTIONS = (
    "When is the {project} {topic} deadline?",
    "Who owns the {topic} runbook for {project}?",
    "Which tool does {project} use for the {topic}?",
    "Where is {person} flying for the {project} kickoff?",
    "What happened to {tool} latency on {project}?",
    "How many engineers work on {project} in {place}?",
    "What did {person} and {person2} review in {place}?",
    "Why did {person} move the {project} {topic}?",
    "Who fixed the {tool} bug affecting the {topic}?",
    "What is the {project} budget for the {topic}?",
    "Which alert did {person} add for {project} after the outage?",
    "Does {person} prefer {tool} or {tool2} for the {topic}?",
    "Who covers the {project} {topic} while {person} is on leave?",
    "How much data does {project} keep in {tool} for the {topic}?",
    "Where did {person} write the {project} design note?",
    "Which company signed the {topic} contract with {project}?",
)


class Namespace(msgspec.Struct, frozen=True):
    name: str
    weight: float


class Corpus(msgspec.Struct, frozen=True):
    namespaces: tuple[Namespace, ...]
    leaves: tuple[str, ...]
    items: tuple[tuple[str, str], ...]  # (namespace, sentence)


def _slug(word: str) -> str:
    return word.lower().replace(" ", "-")


def namespace_tree(rng: random.Random) -> tuple[list[Namespace], list[str]]:
    """Tenant ``acme`` (4 departments x 5 teams x 2-4 projects) and a smaller ``globex``;
    weights are heavy-tailed (some teams write far more than others), leaves the heaviest."""
    nodes: list[Namespace] = []
    leaves: list[str] = []
    shapes: dict[str, dict[str, tuple[str, ...]]] = {
        "acme": {
            "engineering": ("platform", "search", "payments", "mobile", "data"),
            "sales": ("emea", "americas", "apac", "partners", "enterprise"),
            "support": ("tier1", "tier2", "escalations", "docs", "community"),
            "finance": ("billing", "payroll", "procurement", "audit", "planning"),
        },
        "globex": {"research": ("ml", "infra", "labs"), "operations": ("facilities", "security", "it")},
    }
    for tenant, departments in shapes.items():
        nodes.append(Namespace(tenant, 0.3))
        for department, teams in departments.items():
            nodes.append(Namespace(f"{tenant}/{department}", 0.6 * rng.paretovariate(1.5)))
            for team in teams:
                team_ns = f"{tenant}/{department}/{team}"
                nodes.append(Namespace(team_ns, rng.paretovariate(1.2)))
                for project in rng.sample(PROJECTS, rng.randint(2, 4)):
                    leaf = f"{team_ns}/{_slug(project)}"
                    nodes.append(Namespace(leaf, 1.5 * rng.paretovariate(1.1)))
                    leaves.append(leaf)
    return nodes, leaves


def _slots(rng: random.Random) -> Slots:
    person, person2 = rng.sample(PEOPLE, 2)
    tool, tool2 = rng.sample(TOOLS, 2)
    return {
        "person": person,
        "person2": person2,
        "place": rng.choice(PLACES),
        "project": rng.choice(PROJECTS),
        "tool": tool,
        "tool2": tool2,
        "topic": rng.choice(TOPICS),
        "food": rng.choice(FOODS),
        "company": rng.choice(COMPANIES),
        "weekday": rng.choice(WEEKDAYS),
        "day": str(rng.randint(1, 28)),
        "month": rng.choice(MONTHS),
        "year": rng.choice(YEARS),
        "n": str(rng.choice((rng.randint(2, 99), rng.randint(100, 950)))),
    }


def distinct(count: int, make: Callable[[], str], avoid: frozenset[str] = frozenset()) -> list[str]:
    """``count`` distinct strings from ``make`` (none of them in ``avoid``)."""
    seen: set[str] = set()
    out: list[str] = []
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ValueError(f"cannot make {count} distinct strings from these templates")
        text = make()
        if text not in seen and text not in avoid:
            seen.add(text)
            out.append(text)
    return out


def sentences(count: int, rng: random.Random) -> list[str]:
    return distinct(count, lambda: rng.choice(SENTENCES).format(**_slots(rng)))


def questions(count: int, rng: random.Random, avoid: frozenset[str] = frozenset()) -> list[str]:
    return distinct(count, lambda: rng.choice(QUESTIONS).format(**_slots(rng)), avoid)


def corpus(size: int, seed: int = 7) -> Corpus:
    """``size`` distinct sentences, each placed in a namespace drawn by weight."""
    rng = random.Random(seed)  # noqa: S311 - reproducible data, not secrets
    nodes, leaves = namespace_tree(rng)
    texts = sentences(size, rng)
    places = rng.choices([n.name for n in nodes], weights=[n.weight for n in nodes], k=size)
    return Corpus(tuple(nodes), tuple(leaves), tuple(zip(places, texts, strict=True)))
