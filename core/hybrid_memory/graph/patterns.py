"""Offline extractor: entities of technical and encyclopedic text by rules, relations with the sentence's verb.

No model. Regular expressions find services (``billing-service``, ``auth-api``), hosts and IPs (``db-prod-3``,
``10.0.0.12``), error codes (``ERR_CONN_RESET``, ``E1243``, ``ETIMEDOUT``, ``TimeoutError``), HTTP statuses
(``HTTP 504`` -> "HTTP 504"), endpoints (``POST /v1/charges``), functions (``getUserById()``), tables
(``pg_stat_activity``), versions (``v2.3.1``), constants (``MAX_POOL_SIZE``), and capitalised names
(``Scott Derrickson``, ``FEMA``, ``Gallu``) typed ``PROPER_NOUN``.

Names that open a sentence are kept (a one-word name such as an agency's acronym often does) unless the word
is a common sentence opener: a stop word, an imperative verb of runbooks (``Restart``, ``Check``: ``OPENERS``), or
a word the same chunk also writes in lower case. A lone capitalised opener is a name when its shape says so
(all capitals, an inner capital or a digit: ``FEMA``, ``PostgreSQL``, ``K8s``), when the chunk also writes it
capitalised mid-sentence, or when a verb follows it (``Kowalski restarted ...``).

Stop entities (``STOP_ENTITIES``): protocol, format, unit, time-zone and log-level words (``UTC``, ``POST``,
``SQL``, ``DNS``, ``FATAL``, ...) are never entities on their own: they occur in every incident, so as nodes they
would sit at the centre of every community and say nothing. They stay inside the entities they qualify
(``HTTP 504``, ``POST /v1/charges``).

Relations: entities of a sentence are grouped when only ``and``/``or``/commas/brackets separate them; two
consecutive groups are related by the verb phrase between them when there is one (``billing-service`` *retries
on* ``db-prod-3``: auxiliaries, the verb and its particles, source = the left entity), every other pair of the
sentence by ``"co-occurs with"`` (ends in normalised-key order). Strength = the number of sentences of the chunk
stating that relation. Verbs are recognised without a tagger: a word of ``VERBS``, a word after an auxiliary
or modal, or an ``-ed``/``-ing``/``-s`` form that is not a stop word or a listed noun (``NOT_VERBS``).
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import pairwise

from .models import ExtractedEntity, ExtractedRelation
from .normalize import normalize_name

__all__ = ["CO_OCCURS", "OPENERS", "STOP_ENTITIES", "VERBS", "OfflineExtractor", "split_sentences"]

CO_OCCURS = "co-occurs with"

_SENTENCE = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[^\W_])|\n\s*\n|\n(?=\s*[-*#>|])|(?<=[:;])\n")
_ABBREVIATIONS = {
    "mr",
    "mrs",
    "ms",
    "dr",
    "prof",
    "sr",
    "jr",
    "st",
    "mt",
    "gen",
    "col",
    "lt",
    "sgt",
    "capt",
    "gov",
    "sen",
    "rep",
    "inc",
    "ltd",
    "co",
    "corp",
    "vs",
    "no",
    "fig",
    "approx",
    "e.g",
    "i.e",
    "etc",
    "u.s",
    "u.k",
}
TITLES = {
    "mr",
    "mrs",
    "ms",
    "miss",
    "dr",
    "prof",
    "professor",
    "sir",
    "dame",
    "lord",
    "lady",
    "president",
    "senator",
    "governor",
    "general",
    "colonel",
    "captain",
    "judge",
    "mayor",
    "minister",
    "chancellor",
}
"""Titles before a name ("Dr", "President"), casefolded: part of no entity name here, and dropped from the front of
a name when ``resolve`` compares aliases."""

STOP_ENTITIES: dict[str, str] = {
    **{
        w: "time zone or time word"
        for w in (
            "UTC GMT Z TZ PST PDT EST EDT CST CDT MST MDT HST AKST CET CEST EET EEST WET BST IST JST KST AEST AEDT "
            "NZST AM PM ETA EOD"
        ).split()
    },
    **{
        w: "log level"
        for w in (
            "TRACE DEBUG INFO NOTICE WARN WARNING ERROR ERR FATAL CRITICAL CRIT ALERT EMERG EMERGENCY PANIC SEVERE"
        ).split()
    },
    **{w: "HTTP method" for w in "GET POST PUT PATCH DELETE HEAD OPTIONS CONNECT".split()},
    **{
        w: "protocol, format or generic acronym"
        for w in (
            "HTTP HTTPS TCP UDP IP IPV4 IPV6 DNS TLS SSL SSH SFTP FTP SMTP IMAP NTP LDAP SAML OAUTH JWT GRPC RPC REST "
            "SOAP SQL NOSQL JSON YAML XML CSV HTML CSS API APIS URL URI "
            "CPU GPU RAM SSD HDD IO OOM GC JVM VM VMS OS ID IDS "
            "UUID CLI UI UX SDK SLA SLO SLI RPS QPS TPS P50 P90 P95 P99 ACL CIDR VPC VPN NAT LB CDN MB GB KB TB MS "
            "ASAP FYI TODO FAQ OK N/A NA RCA PR CI CD QA SRE WAF DBA MFA SSO IAM"
        ).split()
    },
}
"""Words never taken as entities on their own (upper-case key) -> why: time zones/time words, log levels, HTTP
methods, protocols/formats/units/generic acronyms. They occur in nearly every incident note, so as entities they
would be hubs that join unrelated communities."""

OPENERS = set(
    """restart restarted reboot check run rerun deploy redeploy roll rollback revert verify ensure set use add
    remove delete drop update upgrade downgrade open close wait confirm scale drain page escalate notify note see
    read write create stop start kill flush clear purge rotate renew disable enable increase decrease raise lower
    reduce bump pin unpin tag merge apply run follow monitor watch look find search grep tail inspect investigate
    review test retry reset reconnect migrate move copy backup restore replace switch fail failover promote demote
    block unblock allow deny mark assign ask call tell send post get fetch pull push build install uninstall
    configure reconfigure edit change fix patch mitigate resolve acknowledge ack silence mute snooze archive
    yesterday today tomorrow tonight later earlier now next first second third finally meanwhile currently
    initially eventually afterwards overnight again please only always never also still just then thus hence
    otherwise instead once twice every both either neither another other such same several few many most much
    more less some any all no none each nothing everything something anything nobody everyone someone users user
    customers customer traffic latency errors requests alerts alert logs log metrics impact root cause summary
    action actions timeline status resolution detection owner owners incident incidents outage
    gateway database databases server servers service services cluster clusters node nodes host hosts cache queue
    proxy worker workers backend frontend app application job jobs pipeline deployment deploys release build disk
    memory network load rollback migration backup replica replicas primary leader scheduler monitoring dashboard
    pager team teams engineer engineers system systems platform storage bucket index shard shards partition topic
    consumer producer broker container containers pod pods cron certificate config configuration endpoint
    endpoints request response responses connection connections pool query queries table tables schema client
    clients version versions upgrade patch job""".split()
)
"""Capitalised sentence openers that are not names: imperative verbs of runbooks, time and sequence adverbs,
quantifiers, and the generic nouns of incident reports and infrastructure (``Gateway returned 503``)."""

VERBS = set(
    """is are was were be been being has have had do does did can could will would shall should may might must
    hit hits set sets put puts run runs ran sent read reads wrote write writes lost lose loses took take takes
    threw throw throws began begin saw see sees got get gets made make makes broke break breaks fell led lead
    leads kept keep keeps went go goes came come comes left leave leaves built build builds shut cut cuts spun
    held hold holds sold told found find finds became become becomes gave give gives knew grew rose drew flew
    caught brought stood understood spoke chose drove struck hung stuck split spread quit let lets call calls
    use uses need needs own owns serve serves host hosts run point points depend depends rely relies belong
    belongs contain contains include includes require requires return returns reach reaches fail fails time
    said says say told tell tells asked ask asks
    times back backs feed feeds route routes store stores cache caches send sends queue queues lock locks
    page pages alert alerts emit emits publish publishes consume consumes replicate replicates""".split()
)
"""Verbs recognised without an ``-ed``/``-ing``/``-s`` ending (irregular forms, auxiliaries, frequent bases)."""

NOT_VERBS = set(
    """this his its us thus yes less unless across towards afterwards sometimes perhaps always various previous
    serious status bus alias analysis basis news series seconds minutes hours days weeks months years ms
    users customers requests errors connections messages events records rows bytes instances nodes pods replicas
    files tables queries jobs metrics incidents services hosts clusters regions zones disks keys values
    ratings reviews notes steps results items docs logs_ red bed need speed seed feed indeed hundred""".split()
)

_AUX = {
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "has",
    "have",
    "had",
    "do",
    "does",
    "did",
    "can",
    "could",
    "will",
    "would",
    "shall",
    "should",
    "may",
    "might",
    "must",
    "not",
    "never",
    "n't",
    "cannot",
}
_MODALS = {
    "can",
    "could",
    "will",
    "would",
    "shall",
    "should",
    "may",
    "might",
    "must",
    "to",
    "did",
    "does",
    "do",
    "cannot",
}
_PARTICLES = {
    "on",
    "to",
    "from",
    "with",
    "into",
    "onto",
    "over",
    "at",
    "for",
    "by",
    "after",
    "out",
    "up",
    "down",
    "back",
    "off",
    "in",
    "of",
    "against",
    "via",
    "through",
    "behind",
    "across",
    "as",
    "about",
    "under",
    "above",
    "below",
    "within",
    "without",
    "per",
    "toward",
    "towards",
    "upon",
}
_DETERMINERS = {"the", "a", "an", "its", "their", "his", "her", "our", "your", "this", "that", "these", "those"}
_CLAUSE_BREAKS = {
    "when",
    "while",
    "because",
    "if",
    "although",
    "though",
    "whereas",
    "unless",
    "until",
    "where",
    "which",
    "who",
    "whom",
    "whose",
}
_GROUP_GAP = re.compile(r"^[\s,()\[\]/&]*(?:(?:and|or|and/or|nor|plus|&)[\s,()\[\]]*)?$", re.I)
_GAP_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
_MAX_GAP_WORDS = 8

_HTTP_NAMES = (
    r"Bad Request|Unauthorized|Forbidden|Not Found|Conflict|Too Many Requests|Internal Server Error|"
    r"Bad Gateway|Service Unavailable|Gateway Timeout"
)
# (type, pattern, group holding the name); earlier rules win overlapping spans; the whole match is masked and is
# the entity's span, except for the rules in _SPAN_IS_GROUP (the words before the status are not the entity).
_RULES: list[tuple[str, re.Pattern[str], int]] = [
    ("HTTP_STATUS", re.compile(r"\bHTTP(?:/\d(?:\.\d)?)?[ /:-]?([1-5]\d\d)\b"), 1),
    ("HTTP_STATUS", re.compile(rf"\b([1-5]\d\d)\s+(?:{_HTTP_NAMES})\b"), 1),
    ("HTTP_STATUS", re.compile(r"\b(?:status(?: code)?|returned|returns|got)\s+([1-5]\d\d)\b", re.I), 1),
    ("VULNERABILITY", re.compile(r"\bCVE-\d{4}-\d{4,7}\b"), 0),
    ("ENDPOINT", re.compile(r"\b((?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) /[\w\-./{}:%]*[\w}/])"), 1),
    ("HOST", re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{2,5})?\b"), 0),
    ("VERSION", re.compile(r"\bv\d+(?:\.\d+){1,3}(?:-[0-9A-Za-z.]+)?\b|\b\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?\b"), 0),
    ("FUNCTION", re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\(\)"), 0),
    ("HOST", re.compile(r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)*-\d+[a-z]?\b(?![-.(])"), 0),  # instance names: node-7
    (
        "SERVICE",
        re.compile(
            r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?:service|svc|api|gateway|worker|server|proxy|queue|cache|daemon|"
            r"scheduler|consumer|producer|frontend|backend|app|indexer|router|controller|manager|monitor|broker|"
            r"exporter|collector|agent|store)\b(?!-\w)"
        ),
        0,
    ),
    (
        "HOST",
        re.compile(
            r"\b(?:[a-z][a-z0-9]*-)+(?:prod|production|staging|stg|dev|qa|test)(?:-[a-z0-9]+)*\b|"
            r"\b(?:db|pg|mysql|redis|kafka|web|app|api|cache|node|host|srv|worker|lb|es)-[a-z0-9-]*\d\b|"
            r"\b[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+\.(?:internal|local|lan|corp)\b"
        ),
        0,
    ),
    (
        "ERROR_CODE",
        re.compile(
            r"\b(?:ERR|ERROR|E)_[A-Z0-9_]+\b|\bE\d{3,5}\b|"
            r"\bE(?:CONN[A-Z]+|TIMEDOUT|NOENT|PIPE|ACCES|ADDRINUSE|HOSTUNREACH|NOTFOUND)\b|"
            r"\b(?:SERVFAIL|NXDOMAIN|OOMKilled|CrashLoopBackOff|ImagePullBackOff|SIG(?:KILL|TERM|SEGV|HUP|INT))\b"
        ),
        0,
    ),
    ("ERROR_CODE", re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Timeout)\b"), 0),
    ("CONSTANT", re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"), 0),
    ("TABLE", re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b(?!\()"), 0),
]
_SPAN_IS_GROUP = {2}  # index in _RULES of "returned 503"
_WORD = re.compile(r"[^\W\d_](?:[\w'’&.-]*[\w])?|\S")
_CONNECTORS = {"of", "de", "du", "des", "van", "von", "der", "den", "la", "le", "del", "da", "di", "y", "bin", "al"}
_STOP = set(
    """a an the this that these those it its he she his her they their them we our you your i in on at of for from to
    by with as and or but if when while after before during since until although though because however also then
    there here what which who whom whose where why how all any each every some many most several such no not yes
    is was are were be been being has have had do does did can could will would shall should may might must
    january february march april may june july august september october november december monday tuesday wednesday
    thursday friday saturday sunday mr mrs ms dr st""".split()
)


_NAME_BREAKERS = {"time zone or time word", "log level", "HTTP method"}


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after ``.!?`` followed by space and a letter, at blank lines and list items.

    Dots inside tokens (``v2.3.1``, ``10.0.0.12``, ``getUser()``) never split, nor the dot of a title or common
    abbreviation (``Dr. Chen``, ``Acme Inc. said``: ``_ABBREVIATIONS``). Returns non-empty stripped strings.
    """
    pieces = [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]
    out: list[str] = []
    for piece in pieces:
        if out and out[-1].endswith(".") and _last_word(out[-1]) in _ABBREVIATIONS:
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def _last_word(sentence: str) -> str:
    words = sentence[:-1].rsplit(None, 1)
    return words[-1].casefold().lstrip("(\"'") if words else ""


def _is_stop_entity(name: str) -> bool:
    """``UTC``, ``POST``, ``Info``: a stop word in capitals or capitalised (see ``STOP_ENTITIES``)."""
    name = name.rstrip(".")
    if name.casefold() in TITLES:
        return False
    return name.upper() in STOP_ENTITIES and (name.isupper() or name[1:].islower())


def _name_shaped(word: str) -> bool:
    """All capitals (>= 2 letters), an inner capital or a digit: ``FEMA``, ``PostgreSQL``, ``K8s``."""
    letters = [c for c in word if c.isalpha()]
    return (
        (len(letters) >= 2 and all(c.isupper() for c in letters))
        or any(c.isupper() for c in word[1:])
        or any(c.isdigit() for c in word)
    )


def _verb_like(word: str) -> bool:
    w = word.casefold()
    if w in VERBS:
        return True
    if w in _STOP or w in NOT_VERBS or len(w) < 4:
        return False
    return w.endswith(("ed", "ing")) or (w.endswith("s") and not w.endswith(("ss", "us", "is", "ous")))


class _ChunkContext:
    """What the whole chunk says about its words: lower-case words, and words capitalised mid-sentence."""

    def __init__(self, sentences: list[str]):
        self.lower: set[str] = set()
        self.capitalised: set[str] = set()
        for sentence in sentences:
            words = [m.group(0) for m in _WORD.finditer(sentence) if m.group(0)[0].isalpha()]
            for i, word in enumerate(words):
                if word[0].islower():
                    self.lower.add(word)
                elif i > 0:
                    self.capitalised.add(word.rstrip("."))


def _opener_is_name(word: str, next_word: str, context: _ChunkContext | None) -> bool:
    """Whether a lone capitalised word that opens a sentence is a name (see the module notes)."""
    folded = word.casefold()
    if folded in _STOP or folded in OPENERS or _is_stop_entity(word):
        return False
    if _name_shaped(word):
        return True
    if context is not None:
        if word in context.capitalised:
            return True
        if folded in context.lower:
            return False
    return bool(next_word) and next_word[0].islower() and _verb_like(next_word)


def _proper_nouns(
    sentence: str, masked: list[tuple[int, int]], context: _ChunkContext | None = None
) -> list[tuple[int, str]]:
    """(start, name) of the capitalised names of one sentence."""
    tokens = [(m.group(0), m.start()) for m in _WORD.finditer(sentence)]
    names: list[tuple[int, str]] = []
    group: list[tuple[str, int]] = []
    pending: list[tuple[str, int]] = []  # connectors seen after a capitalised word
    first_word_start = next((s for t, s in tokens if t[0].isalpha()), None)
    opener_starts = {first_word_start} | {
        tokens[i + 1][1] for i, (t, _) in enumerate(tokens[:-1]) if t in (":", ";", "—", "–") or t == "-"
    }

    def flush(next_word: str) -> None:
        words = list(group)
        initial = bool(words) and words[0][1] in opener_starts
        if initial and len(words) >= 2 and (words[0][0].casefold() in OPENERS or _is_stop_entity(words[0][0])):
            words.pop(0)  # "Restart Kafka": the imperative is not part of the name
            initial = False
        while words and words[0][0].casefold() in _STOP and words[0][0].rstrip(".").casefold() not in TITLES:
            words.pop(0)
            initial = False
        while words and words[-1][0].casefold() in _CONNECTORS:
            words.pop()
        if len(words) >= 2:
            names.append((words[0][1], " ".join(w for w, _ in words)))
        elif len(words) == 1:
            word = words[0][0]
            if _is_stop_entity(word) or word.casefold() in _STOP or word.rstrip(".").casefold() in TITLES:
                pass
            elif initial:
                if _opener_is_name(word, next_word, context):
                    names.append((words[0][1], word))
            elif len(word) >= 3 or _name_shaped(word):
                names.append((words[0][1], word))
        group.clear()
        pending.clear()

    for token, start in tokens:
        if any(a <= start < b for a, b in masked):
            flush(token)
            continue
        if token[0].isalpha() and token[0].isupper():
            if group and token.isupper() and STOP_ENTITIES.get(token) in _NAME_BREAKERS:
                flush(token)  # "FEMA UTC": a time word, log level or HTTP method ends the name ("Café API" does not)
                continue
            group.extend(pending)
            pending.clear()
            group.append((token.rstrip(".") if token.rstrip(".").casefold() not in TITLES else token, start))
        elif group and token.casefold() in _CONNECTORS:
            pending.append((token, start))
        elif group and token == "." and group[-1][0].casefold() in TITLES:
            group[-1] = (group[-1][0] + ".", group[-1][1])  # "Dr." then the name
            continue
        else:
            flush(token)
    flush("")
    return names


def _verb_phrase(gap: str) -> str:
    """The relation phrase of the text between two entity groups ("" when it holds no verb or is too long).

    After ReVerb's syntactic constraint (Fader, Soderland & Etzioni 2011, "Identifying Relations for Open
    Information Extraction"): a verb, optionally followed by words ending in a preposition (``V | V P |
    V W* P``), so ``blocked the release of`` when the gap ends with a preposition, else the verb group alone
    (auxiliaries, the verb, following verbs and particles: ``was rolled back by``, ``kept calling``).
    """
    if re.search(r"[;:!?]|\. ", gap):
        return ""
    words = [w.strip(".,()[]\"'").casefold() for w in gap.split()]
    words = [w for w in words if w]
    if not words or len(words) > _MAX_GAP_WORDS:
        return ""
    verb = None
    for i, word in enumerate(words):
        if not _GAP_WORD.fullmatch(word):
            continue
        if (i > 0 and words[i - 1] in _MODALS and word not in _STOP | _PARTICLES) or _verb_like(word):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            if word not in _AUX and not word.endswith(("ed", "ing")) and nxt.endswith("ed") and _verb_like(nxt):
                continue  # "webhooks failed", "call returned": a noun before the verb
            verb = i
            break
    if verb is None or any(w in _CLAUSE_BREAKS for w in words[verb + 1 :]):
        return ""  # "paged the team when db-prod-3 ran out": the object is in another clause
    start = verb
    while start > 0 and words[start - 1] in _AUX | _MODALS:
        start -= 1
    tail = len(words)
    while tail > verb + 1 and words[tail - 1] in _DETERMINERS:
        tail -= 1  # "stores objects in the <entity>"
    if words[tail - 1] in _PARTICLES and tail - 1 > verb:
        return " ".join(words[start:tail])  # V W* P
    end = verb + 1
    while end < len(words) and (
        words[end] in _PARTICLES
        or words[end] in _AUX
        or words[end].endswith("ing")
        or (_verb_like(words[end]) and words[end - 1] in _AUX)  # "was rolled", not "reported degraded"
    ):
        end += 1
    return " ".join(words[start:end])


class OfflineExtractor:
    """Rule-based extractor for technical text (and capitalised names in general text); needs no model.

    ``proper_nouns``: also find capitalised names (off for logs and code-only memories where they add noise).
    ``verb_relations``: relate consecutive entities by the verb phrase between them (else every pair of a
    sentence "co-occurs with"). Deterministic: the same text gives the same entities and relations in the same
    order.
    """

    def __init__(self, *, proper_nouns: bool = True, verb_relations: bool = True):
        self.proper_nouns = proper_nouns
        self.verb_relations = verb_relations
        self.name = "offline-rules" + ("" if proper_nouns else "-technical") + ("" if verb_relations else "-cooc")

    def spans_in(self, sentence: str, context: _ChunkContext | None = None) -> list[tuple[int, int, str, str]]:
        """(start, end, surface form, type) of the entities of one sentence, in order of appearance."""
        found: list[tuple[int, int, str, str]] = []
        masked: list[tuple[int, int]] = []
        for rule, (entity_type, pattern, group) in enumerate(_RULES):
            for m in pattern.finditer(sentence):
                start, end = m.span()
                if any(a < end and start < b for a, b in masked):
                    continue
                masked.append((start, end))
                name = m.group(group)
                if entity_type == "HTTP_STATUS":
                    name = f"HTTP {name}"
                span = m.span(group) if rule in _SPAN_IS_GROUP else (start, end)
                found.append((span[0], span[1], name, entity_type))
        if self.proper_nouns:
            for start, name in _proper_nouns(sentence, masked, context):
                found.append((start, start + len(name), name, "PROPER_NOUN"))
        found.sort(key=lambda t: (t[0], t[2]))
        return found

    def entities_in(self, sentence: str) -> list[tuple[str, str]]:
        """(surface form, type) of the entities of one sentence, in order of first appearance."""
        return [(name, entity_type) for _, _, name, entity_type in self.spans_in(sentence)]

    def _sentence_relations(
        self, sentence: str, spans: list[tuple[int, int, str, str]]
    ) -> dict[tuple[str, str], tuple[str, str, str]]:
        """(key a, key b) sorted -> (source, target, description) for every pair of distinct entities."""
        keyed = [(s, e, name, normalize_name(name)) for s, e, name, _ in spans if normalize_name(name)]
        groups: list[list[tuple[int, int, str, str]]] = []
        for span in keyed:
            if groups and _GROUP_GAP.match(sentence[groups[-1][-1][1] : span[0]]):
                groups[-1].append(span)
            else:
                groups.append([span])
        out: dict[tuple[str, str], tuple[str, str, str]] = {}
        if self.verb_relations:
            for left, right in pairwise(groups):
                phrase = _verb_phrase(sentence[left[-1][1] : right[0][0]])
                if not phrase:
                    continue
                for a in left:
                    for b in right:
                        pair = (min(a[3], b[3]), max(a[3], b[3]))
                        if a[3] != b[3] and pair not in out:
                            out[pair] = (a[2], b[2], phrase)
        for i, a in enumerate(keyed):
            for b in keyed[i + 1 :]:
                pair = (min(a[3], b[3]), max(a[3], b[3]))
                if a[3] != b[3] and pair not in out:
                    first, second = (a, b) if a[3] < b[3] else (b, a)
                    out[pair] = (first[2], second[2], CO_OCCURS)
        return out

    def extract(self, text: str) -> tuple[list[ExtractedEntity], list[ExtractedRelation]]:
        """Entities (one per distinct surface form and type, in order of first appearance) and relations
        (verb phrase or co-occurrence, see the module notes; strength = number of sentences stating it)."""
        entities: dict[tuple[str, str], ExtractedEntity] = {}
        counts: Counter[tuple[str, str, str]] = Counter()
        sentences = split_sentences(text)
        context = _ChunkContext(sentences)
        for sentence in sentences:
            spans = self.spans_in(sentence, context)
            for _, _, name, entity_type in spans:
                if normalize_name(name):
                    entities.setdefault((name, entity_type), ExtractedEntity(name=name, type=entity_type))
            for source, target, description in self._sentence_relations(sentence, spans).values():
                counts[(source, target, description)] += 1
        relations = [
            ExtractedRelation(source=s, target=t, description=d, strength=float(n))
            for (s, t, d), n in sorted(
                counts.items(), key=lambda x: (normalize_name(x[0][0]), normalize_name(x[0][1]), x[0][2])
            )
        ]
        return list(entities.values()), relations
