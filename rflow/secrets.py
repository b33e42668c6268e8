"""Filling in ``${VAR}`` when an effect is carried out, and keeping secret values out of
everything that comes back: step results, errors, log lines and command output.

A step's input holds placeholders (``${API_TOKEN}``, ``${{ env.NAME }}`` rendered as
``${NAME}``) and run data escaped as ``$${``. Right before an executor hands the input to
the world, :meth:`Secrets.resolve` fills the placeholders in from the worker's
environment; before the effect's output or error becomes a step result (or a log line),
:meth:`Secrets.scrub` writes every value filled in, and every other value the effect was
given (a channel's URL, a command's environment), back as its placeholder. So an
endpoint that echoes a header, or an exception that quotes a URL, cannot carry a value
into the journal.

What is scrubbed, for each value:

1. the value as written, as JSON and as a URL would quote it, in any letter case (an
   address comes back checksummed however it was written);
2. its Base64 forms, standard and URL-safe, also where it is part of a longer encoded text
   (``Authorization: Basic`` of ``user:value``) — for values of :data:`BASE64_MIN` bytes
   or more, where a piece of the encoding cannot turn up by chance;
3. a value shorter than :data:`MIN_SCRUBBED` characters only where it stands alone (not
   inside a longer word or number), or it would match all over ordinary output;
4. a value that is a URL (an RPC URL with an API key, a webhook URL) is shown as its
   scheme and host only, ``https://mainnet.infura.io/…`` (:func:`redact_url`) — unless the
   effect's input named it (``url: "${API_URL}"``): then it reads as written there — and each
   part of it that can carry a key is scrubbed wherever it turns up alone: the user and
   password, the query string and its values, and every path segment that looks like a
   key (:func:`url_secrets`).

The same scrubbing covers a whole process: :func:`process_secrets` gathers every
secret-bearing setting (the RPC URLs, the database URL, the API tokens, and every variable
a project names: relayer keys, principal tokens, webhook secrets, channel URLs, the
``${VAR}`` of its steps) and :func:`scrub_logs` applies it to every log record the
process makes, whatever library makes it.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
from collections.abc import Mapping
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from pydantic import SecretStr

from rflow.codecs import json
from rflow.failures import FailureKind, RflowError, StepError
from rflow.lang.envsubst import EnvSubstitutionError, names, placeholder, substitute

if TYPE_CHECKING:
    from rflow.lang import Project
    from rflow.settings import Settings

MIN_SCRUBBED = 4
"""Values shorter than this are scrubbed only where they stand alone (bounded by
characters that are neither letters nor digits): inside longer words they would match all
over ordinary output."""

BASE64_MIN = 8
"""Bytes a value needs before the pieces of its Base64 encoding inside a longer encoded
text (``Basic`` credentials) are scrubbed too: shorter pieces could occur by chance."""

HIDDEN = "…"
"""What a scrubbed part of a URL (or a value that cannot be shown at all) is shown as."""

_KEY_LIKE = 16
"""A path segment this long is taken for a key, whatever its characters."""
_KEY_NAMES = re.compile(r"key|token|secret|auth|pass|sig|cred", re.IGNORECASE)
"""Query parameter names whose values are secret however short they are."""
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#]+", re.ASCII)


_FOUND_IN: dict[tuple[int, tuple[str, ...]], tuple[Mapping[str, str], tuple[str, ...]]] = {}
"""(id of an environment, texts) -> (that environment, the variables whose values the
texts contain): a worker's environment is read once, when it starts, and a channel's
texts do not change, so each notify need not search every variable again."""
_FOUND_KEPT = 1024


# --- URLs ---------------------------------------------------------------------------


def redact_url(url: str) -> str:
    """``url`` as its scheme and host (with the port) only: everything that can carry a
    key (user, password, path, query, fragment) becomes ``/…``.

    >>> redact_url("https://user:KEY@mainnet.infura.io/v3/KEY")
    'https://mainnet.infura.io/…'

    A URL with nothing beyond its host is shown as it is; what is not a URL with a host is
    shown as ``…`` (it may be a key itself)."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return HIDDEN
    if not parts.scheme or not host:
        return HIDDEN
    if ":" in host:
        host = f"[{host}]"
    shown = f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")
    extra = "@" in parts.netloc or parts.path.strip("/") or parts.query or parts.fragment
    return shown + "/" + HIDDEN if extra else shown


def is_url(text: str) -> bool:
    """Whether ``text`` is a URL with a host (``scheme://host...``)."""
    return bool(_URL.match(text.strip()))


def url_secrets(url: str, *, credentials_only: bool = False) -> tuple[str, ...]:
    """The parts of ``url`` that can carry a key, as written and unquoted: its user and
    password (and ``user:password``, which Basic authentication encodes); unless
    ``credentials_only``, its query string, each query value that is long enough or under
    a name such as ``key`` or ``token``, its fragment, and each path segment that looks
    like a key (:data:`_KEY_LIKE` characters or more, or a letter and a digit among at
    least :data:`MIN_SCRUBBED`). ``credentials_only`` is for a database URL, whose user,
    path (the database's name) and query are not secret."""
    try:
        parts = urlsplit(url.strip())
        user, password = parts.username, parts.password
    except ValueError:
        return ()
    found: list[str] = []
    if password:
        found.append(password)
        if user is not None:
            found.append(f"{user}:{password}")
    if credentials_only:
        found += [
            value
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
            if value and name.lower() in ("password", "sslpassword")
        ]
        return _with_unquoted(found)
    if user is not None:
        found.append(user)
    if parts.query:
        found.append(parts.query)
        found += [
            value
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
            if value and (len(value) >= MIN_SCRUBBED or _KEY_NAMES.search(name))
        ]
    if parts.fragment:
        found.append(parts.fragment)
    found += [segment for segment in parts.path.split("/") if _key_like(unquote(segment))]
    return _with_unquoted(found)


def _key_like(segment: str) -> bool:
    if len(segment) >= _KEY_LIKE:
        return True
    return (
        len(segment) >= MIN_SCRUBBED
        and any(c.isdigit() for c in segment)
        and any(c.isalpha() for c in segment)
    )


def _with_unquoted(found: list[str]) -> tuple[str, ...]:
    every = dict.fromkeys(found)
    every.update(dict.fromkeys(unquote(part) for part in found))
    return tuple(part for part in every if part)


def _url_forms(url: str) -> list[str]:
    """``url``, the same without its user and password (as an HTTP client quotes it once
    it has moved them into a header), and the URL of the same endpoint a client derives
    from each (the websocket of an HTTP URL, and the other way round)."""
    forms = [url]
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if sep and "@" in authority:
        forms.append(f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}")
    for form in list(forms):
        for one, other in (("http", "ws"), ("ws", "http")):
            if form.startswith((f"{one}://", f"{one}s://")):
                forms.append(other + form[len(one) :])
    return forms


# --- forms of a value ----------------------------------------------------------------


def _forms(value: str) -> list[str]:
    """``value`` as written, as JSON and URLs quote it, and its Base64 forms."""
    forms = [value, json.dumps(value).decode()[1:-1], quote(value, safe=""), quote(value)]
    raw = value.encode()
    if len(value) >= MIN_SCRUBBED:
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            padded = encode(raw).decode()
            forms += [padded, padded.rstrip("=")]
            if len(raw) >= BASE64_MIN:
                forms += _base64_pieces(raw, encode)
    return forms


def _base64_pieces(raw: bytes, encode: Any) -> list[str]:
    """The characters of ``raw``'s encoding that do not depend on what surrounds it in a
    longer encoded text, for each of the three alignments it can have there."""
    pieces = []
    for offset in (0, 1, 2):
        text = encode(b"\0" * offset + raw).decode().rstrip("=")
        start = (offset * 8 + 5) // 6  # characters that carry bits of the bytes before
        end = len(text) - (1 if (offset + len(raw)) % 3 else 0)  # ... and of those after
        pieces.append(text[start:end])
    return pieces


class Secrets:
    """The values handed to one effect (or known to one process), each with what it is
    shown as: its placeholder, or for a URL its scheme and host."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.used: dict[str, str] = {}
        """Variable name -> value, for every variable filled in or hidden."""
        self.filled: set[str] = set()
        """The variables filled into the effect's input (a ``${VAR}`` it names)."""
        self.urls: dict[str, bool] = {}
        """URL -> whether only its credentials are secret, for every URL hidden by value."""
        self.values: dict[str, str] = {}
        """Value -> what it is shown as, for values hidden without a variable."""

    # --- filling in -----------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """``value`` (an effect's input) with every ``${VAR}`` filled in and every ``$${``
        read as ``${``, in all its strings, mapping keys included.

        Raises ``invalid_input`` naming a variable this worker does not have."""
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, Mapping):
            return {self.resolve(key): self.resolve(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.resolve(item) for item in value]
        return value

    def _text(self, text: str) -> str:
        if "$" not in text:
            return text
        try:
            resolved, used = substitute(text, self.env)
        except EnvSubstitutionError as exc:
            raise RflowError(FailureKind.INVALID_INPUT, f"on this worker: {exc}") from None
        if not self.filled.issuperset(used):
            self.filled.update(used)
            self.__dict__.pop("_pattern", None)
        self.hide(*used)
        return resolved

    def hide(self, *variables: str) -> Secrets:
        """Scrub the values of ``variables`` too (those this worker has)."""
        for name in variables:
            value = self.env.get(name)
            if value and name not in self.used:
                self.used[name] = value
                self.__dict__.pop("_pattern", None)
        return self

    def hide_urls(self, *urls: str | None, credentials_only: bool = False) -> Secrets:
        """Show each of ``urls`` as its scheme and host, and scrub its parts that can carry
        a key (only its password with ``credentials_only``, as for a database URL)."""
        for url in urls:
            if url and url not in self.urls:
                self.urls[url] = credentials_only
                self.__dict__.pop("_pattern", None)
        return self

    def hide_value(self, value: str, shown: str) -> Secrets:
        """Scrub ``value`` (one not read from a variable), showing it as ``shown``."""
        if value and self.values.get(value) != shown:
            self.values[value] = shown
            self.__dict__.pop("_pattern", None)
        return self

    def hide_found_in(self, *texts: str) -> Secrets:
        """Scrub the value of every variable that one of ``texts`` contains: what a
        declaration substituted when the file loaded (a channel's URL), which the
        declaration no longer names."""
        key = (id(self.env), texts)
        found = _FOUND_IN.get(key)
        if found is None or found[0] is not self.env:
            names = tuple(
                name
                for name, value in self.env.items()
                if len(value) >= MIN_SCRUBBED and any(value in text for text in texts)
            )
            if len(_FOUND_IN) >= _FOUND_KEPT:
                _FOUND_IN.clear()
            found = _FOUND_IN[key] = (self.env, names)
        return self.hide(*found[1])

    # --- scrubbing ------------------------------------------------------------------

    def _shown(self) -> dict[str, str]:
        """Each text to scrub -> what it is shown as; the first entry for a text wins."""
        shown: dict[str, str] = {}
        # A value the step's input named is shown as it was written there, URL or not.
        for name in sorted(self.filled & self.used.keys()):
            shown.setdefault(self.used[name], placeholder(name))
        urls = dict(self.urls)
        for value in self.used.values():
            if is_url(value):
                urls.setdefault(value, False)
        for url, credentials_only in sorted(urls.items()):
            for form in _url_forms(url):
                redacted = redact_url(form)
                if redacted != form:
                    shown.setdefault(form, redacted)
            for part in url_secrets(url, credentials_only=credentials_only):
                shown.setdefault(part, HIDDEN)
        for name, value in sorted(self.used.items()):
            shown.setdefault(value, placeholder(name))
        for value, replacement in self.values.items():
            shown.setdefault(value, replacement)
        return shown

    @cached_property
    def _pattern(self) -> tuple[re.Pattern[str], dict[str, str]] | None:
        shown = self._shown()
        return _compiled(tuple(shown.items())) if shown else None

    def scrub(self, value: Any) -> Any:
        """``value`` (an output, a message) with every hidden value written as its
        placeholder, in all its strings, mapping keys included."""
        found = self._pattern
        if found is None:
            return value
        return _scrub(value, *found)

    def scrub_error(self, error: StepError | None) -> StepError | None:
        """``error`` with its message scrubbed."""
        if error is None:
            return None
        message = self.scrub(error.message)
        return error if message == error.message else error.model_copy(update={"message": message})


@lru_cache(maxsize=256)
def _compiled(shown: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], dict[str, str]]:
    """The pattern finding every form of each value of ``shown`` (value, what it is shown
    as), and each form's replacement. The same few sets of values come back effect after
    effect (a relayer's send results hide the same RPC URLs): each is built once."""
    forms: dict[str, str] = {}
    alone: set[str] = set()
    for value, replacement in shown:
        for form in _forms(value):
            key = form.lower()
            if key not in forms:
                forms[key] = replacement
                if len(value) < MIN_SCRUBBED:
                    alone.add(key)
    alternatives = sorted(forms, key=len, reverse=True)  # a longer value first
    pattern = "|".join(
        rf"(?<![0-9a-z]){re.escape(form)}(?![0-9a-z])" if form in alone else re.escape(form)
        for form in alternatives
    )
    return re.compile(pattern, re.IGNORECASE), forms


def _scrub(value: Any, pattern: re.Pattern[str], forms: dict[str, str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(lambda m: forms[m.group(0).lower()], value)
    if isinstance(value, Mapping):
        return {
            _scrub(key, pattern, forms): _scrub(item, pattern, forms) for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_scrub(item, pattern, forms) for item in value]
    return value


def placeholders(value: Any) -> tuple[str, ...]:
    """The variables an effect's input names, in all its strings (no environment needed)."""
    found: dict[str, None] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.update(dict.fromkeys(names(item)))
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return tuple(sorted(found))


# --- a whole process -----------------------------------------------------------------


def project_variables(project: Project) -> tuple[str, ...]:
    """Every variable ``project`` names: each ``*_env`` field (relayer keys, principal
    tokens, webhook secrets, Slack URLs, PagerDuty keys, RPC URLs), the RPC URL variable of
    each endpoint of each network, the ``env`` lists of its workflows and commands, and every ``${VAR}`` in its
    steps."""
    found: dict[str, None] = {}
    for name, network in project.networks.items():
        found.update(dict.fromkeys(variable for _, variable in network.rpc_env_names(name)))
    stack: list[Any] = [project.model_dump(mode="json", by_alias=True, exclude_defaults=True)]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str) and key.endswith("_env") and isinstance(inner, str):
                    found[inner] = None
                elif key == "env" and isinstance(inner, list):
                    found.update(dict.fromkeys(v for v in inner if isinstance(v, str)))
                else:
                    stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and "${" in item:
            found.update(dict.fromkeys(names(item)))
    return tuple(found)


def process_secrets(settings: Settings, project: Project | None, env: Mapping[str, str]) -> Secrets:
    """Every secret-bearing setting of a process that runs ``project`` (if any) with
    ``settings`` in ``env``: what its log lines and its output must never show — the RPC
    URLs and the database URL (as scheme and host), every secret setting (the API tokens),
    and every variable the project names."""
    secrets = Secrets(env)
    secrets.hide_urls(*settings.rpc_urls.values())
    secrets.hide_urls(settings.database_url.get_secret_value(), credentials_only=True)
    secrets.hide(*(name for name in env if name.startswith("RFLOW_RPC_URL_")))
    # Every other secret setting (a token, a credential) is a value, shown as its variable.
    for variable, name in type(settings).variables().items():
        if variable.endswith("_FILE") and variable not in env:
            continue  # read from a file only if this one is set: shown by the variable set
        value = getattr(settings, name, None)
        if isinstance(value, SecretStr) and value is not settings.database_url:
            secrets.hide_value(value.get_secret_value(), placeholder(variable))
    # Each ingress key alone too: a list of them is one setting, a key turns up by itself.
    with contextlib.suppress(Exception):  # a malformed list: the process reports it
        for key in settings.ingress_keyring.keys:
            secrets.hide_value(key.secret.decode(), f"<ingress key {key.id}>")
    if project is not None:
        secrets.hide(*project_variables(project))
        for channel in project.channels.values():
            url = getattr(channel, "url", None)
            if url:
                secrets.hide_urls(url)
                secrets.hide_found_in(url, *getattr(channel, "headers", {}).values())
    return secrets


_LOGGED: list[Secrets] = []
"""What this process's log records are scrubbed with (at most one)."""


def scrub_logs(secrets: Secrets | None) -> None:
    """Scrub every log record this process makes from now on with ``secrets`` (``None``:
    stop): its message and its exception's traceback, whatever logger makes it."""
    _LOGGED[:] = [secrets] if secrets is not None else []
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "scrubs", False):
        logging.setLogRecordFactory(_ScrubbingFactory(factory))


class _ScrubbingFactory:
    """A log record factory that scrubs what the record will print."""

    scrubs = True

    def __init__(self, make: Any) -> None:
        self.make = make

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.make(*args, **kwargs)
        if _LOGGED:
            scrub_record(record, _LOGGED[0])
        return record


def scrub_record(record: logging.LogRecord, secrets: Secrets) -> None:
    """Scrub ``record``'s message and the traceback it carries, in place."""
    try:
        message = record.getMessage()
    except Exception:  # a malformed format string: logging reports it when it emits
        return
    scrubbed = secrets.scrub(message)
    if scrubbed != message:
        record.msg, record.args = scrubbed, None
    if record.exc_info and not record.exc_text:
        # Formatters print exc_text when it is set, rather than formatting again.
        record.exc_text = secrets.scrub(logging.Formatter().formatException(record.exc_info))
