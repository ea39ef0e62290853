"""A real browser, as learners and instructors open things: JupyterLab with each checkpoint's notebook
(as the repository shows it, and as run in a fresh practice folder on the starter), each notebook
exported as static HTML, and both versions of the class report at desktop and phone width.

Chromium is Debian's (`apt-get install chromium fonts-noto-cjk`), driven by Playwright from PyPI; the
test never downloads a browser (`playwright install`) and gives no page the network: every request
that does not go to the local JupyterLab (or a local file) is refused and recorded.

A page that runs scripts (JupyterLab, a static export) counts as idle when its main thread has run no
long task (over 50 ms) for a second; one with none (the class report) once loaded, with its fonts ready
and two frames drawn. Playwright waits inside the page, so a renderer that spins forever (as
JupyterLab's sanitizer did on a broken attribute) would hang the wait itself: every wait is bounded from
Python with `asyncio.wait_for`.

Screenshots go to $PI_COURSE_SCREENSHOTS when set (CI keeps them), else to pytest's temporary folder.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import nbformat
import pytest
from conftest import real_checkpoints
from nbconvert import HTMLExporter
from notebook_runs import RUNS, executed
from pi_course_kit.core import i18n
from pi_course_kit.core.manifest import Checkpoint, Course
from pi_course_kit.instructor.grade import class_report
from sample_class import sample_class

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, ConsoleMessage, Page, Playwright, Route

CHROMIUM = os.environ.get("PI_COURSE_CHROMIUM") or shutil.which("chromium") or ""
FIX = "apt-get install chromium fonts-noto-cjk, then pip install playwright (never `playwright install`)"
#: Set by .ci/run: there, a missing browser is a failure, not a skip.
REQUIRED = os.environ.get("PI_COURSE_REQUIRE_BROWSER") == "1"
#: Flags Debian's chromium needs here (as root, in a container, with no network to try).
FLAGS = [
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
#: The longest a page may stay busy after it was opened (a loaded 2-core CI machine takes about 10 s).
BUSY_BOUND = 90.0
#: How long the main thread must have been free of long tasks for the page to count as idle.
QUIET_MS = 1000
#: Text must stand out from its background at least this much (WCAG 2 AA for normal text).
CONTRAST = 4.5
WIDTHS = {"desktop": 1280, "phone": 390}
#: The static export references these scripts; none of them is needed to show the notebooks' outputs.
#: MathJax typesets LaTeX (the notebooks have none, checked below), require.js loads widgets (none),
#: mermaid draws mermaid blocks (none).
NBCONVERT_OPTIONAL = ("/require.js/", "/mathjax/", "/mermaid")


def _missing() -> str:
    if not CHROMIUM:
        return "no chromium on PATH"
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed"
    return ""


MISSING = _missing()
pytestmark = [pytest.mark.slow, pytest.mark.browser]
if MISSING and not REQUIRED:
    pytestmark.append(pytest.mark.skip(reason=f"{MISSING}: {FIX}"))

T = TypeVar("T")

# Records the end of the last long task (the main thread busy for over 50 ms) for the idle check.
IDLE_PROBE = """
window.__piLastLongTask = 0;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    window.__piLastLongTask = Math.max(window.__piLastLongTask, entry.startTime + entry.duration);
  }
}).observe({type: "longtask", buffered: true});
"""
IDLE = f"() => performance.now() - (window.__piLastLongTask || 0) > {QUIET_MS}"

# The contrast of every element holding text inside `scope` (a CSS selector): its colour (SVG text: its
# fill), faded by the opacity of it and its ancestors, over its background (the ancestors' background
# colours composed over white). Returns the elements below `minimum`.
CONTRAST_PROBE = """
([scope, minimum]) => {
  const parse = (text) => {
    const m = /rgba?\\(([^)]*)\\)/.exec(text || "");
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, bottom) => [0, 1, 2].map((i) => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
  const luminance = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const background = (element) => {
    const layers = [];
    for (let e = element; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    return layers.reverse().reduce((below, layer) => over(layer, below), [255, 255, 255, 1]);
  };
  const faded = (element) => {
    let o = 1;
    for (let e = element; e; e = e.parentElement) o *= parseFloat(getComputedStyle(e).opacity);
    return o;
  };
  const low = [];
  for (const root of document.querySelectorAll(scope)) {
    for (const element of [root, ...root.querySelectorAll("*")]) {
      const text = [...element.childNodes].filter((n) => n.nodeType === 3).map((n) => n.data).join("").trim();
      if (!text) continue;
      const box = element.getBoundingClientRect();
      const style = getComputedStyle(element);
      if (!box.width || !box.height || style.visibility !== "visible" || element.closest("title")) continue;
      const colour = parse(element instanceof SVGElement ? style.fill : style.color);
      if (!colour) continue;
      const below = background(element);
      const shown = over([colour[0], colour[1], colour[2], colour[3] * faded(element)], below);
      const [a, b] = [luminance(shown), luminance(below)].sort((x, y) => y - x);
      const ratio = (a + 0.05) / (b + 0.05);
      if (ratio < minimum) {
        low.push(`${ratio.toFixed(2)}:1 ${style.color} on ${JSON.stringify(below)}: ${text.slice(0, 50)}`);
      }
    }
  }
  return low;
}
"""

# Elements that reach past the viewport's right edge (or start left of it), the page's own width included.
OVERFLOW_PROBE = """
() => {
  const width = document.documentElement.clientWidth;
  const wide = [];
  if (document.documentElement.scrollWidth > width) {
    wide.push(`page ${document.documentElement.scrollWidth}px`);
  }
  for (const element of document.body.querySelectorAll("*")) {
    const box = element.getBoundingClientRect();
    if (!box.width || !box.height) continue;
    if (box.right > width + 1 || box.left < -1) {
      const tag = `<${element.tagName.toLowerCase()} class="${element.getAttribute("class") || ""}">`;
      wide.push(`${tag} ${Math.round(box.left)}..${Math.round(box.right)}px`);
    }
  }
  return wide;
}
"""


@dataclass
class Session:
    """One Chromium for the worker, driven through a private event loop with bounded waits."""

    loop: asyncio.AbstractEventLoop
    playwright: Playwright
    browser: Browser
    shots: Path

    def run(self, step: Awaitable[T], bound: float = BUSY_BOUND) -> T:
        """Run `step` to its end, or fail once `bound` seconds have passed."""
        return self.loop.run_until_complete(asyncio.wait_for(step, bound))


@dataclass
class Visit:
    """What one page did: console errors, requests refused because they left the machine."""

    errors: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


@dataclass
class Guard:
    """Lets a context's requests go only to URLs starting with `allowed`; records the others in `visit`."""

    allowed: str
    visit: Visit = field(default_factory=Visit)


async def _context(session: Session, guard: Guard, width: int, height: int, **options: Any) -> BrowserContext:
    """A fresh context (its own cookies and cache) that refuses every request `guard` does not allow."""
    context = await session.browser.new_context(viewport={"width": width, "height": height}, **options)

    async def route(route: Route) -> None:
        if route.request.url.startswith(guard.allowed):
            await route.continue_()
        else:
            guard.visit.refused.append(route.request.url)
            await route.abort()

    await context.route("**/*", route)
    await context.add_init_script(IDLE_PROBE)
    return context


async def _page(context: BrowserContext, guard: Guard) -> tuple[Page, Visit]:
    """A new page of `context`, with what it logs recorded in the guard's visit (a new one now; a page used
    for several things gets a new visit from `guard.visit = Visit()` before each)."""
    visit = guard.visit = Visit()

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            where = message.location.get("url", "")
            # A request the test refused shows up as a console error naming its URL: counted apart.
            if not (where and where in guard.visit.refused):
                guard.visit.errors.append(f"{message.text} ({where})")

    page = await context.new_page()
    page.on("console", console)
    page.on("pageerror", lambda error: guard.visit.errors.append(f"uncaught: {error}"))
    return page, visit


async def _idle(page: Page, ready: str = "() => true") -> None:
    """Wait until `ready` holds and the main thread has been quiet for QUIET_MS."""
    await page.wait_for_function(f"() => ({ready})() && ({IDLE})()", polling=250, timeout=0)


async def _settled(page: Page) -> None:
    """After a change (a resize): let two frames render, then wait for idle (cells coming into view paint
    late)."""
    await page.evaluate(
        "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"
    )
    await _idle(page)


async def _drawn(page: Page) -> None:
    """A page with no script, loaded: wait for its fonts and two frames, and no quiet second.

    Nothing but the parser and the fonts changes such a page once its `load` event has fired (`goto`
    waits for it), so the idle wait's second of quiet would only stand idle: the class report's 120
    visits spent about two minutes in it.
    """
    await page.evaluate(
        "() => document.fonts.ready.then(() => new Promise("
        "(done) => requestAnimationFrame(() => requestAnimationFrame(done))))"
    )


@dataclass
class Viewer:
    """A context and one page for a kind of screen, reused for every static page shown on it: a new context
    starts a renderer process, measured at about 1.3 s of CPU, while a navigation in an open page costs
    about 0.2 s. Each page is a new document (no script state survives it), and a new `Visit` and guard
    prefix are set before each navigation."""

    context: BrowserContext
    guard: Guard
    page: Page | None = None

    async def show(self, path: Path) -> tuple[Page, Visit]:
        """`path` opened and idle, with requests allowed only to it; (page, what it logged and asked for)."""
        if self.page is None or self.page.is_closed():  # none yet, or its renderer crashed
            self.page, _visit = await _page(self.context, self.guard)
        self.guard.allowed = path.as_uri()
        visit = self.guard.visit = Visit()
        await self.page.goto(path.as_uri())
        if await self.page.evaluate("document.scripts.length") > 0:
            await _idle(self.page)
        else:
            await _drawn(self.page)
        return self.page, visit


# The browser, JupyterLab and its loaded page live as long as the worker (scope "session"): a worker runs
# one checkpoint's tests of several modules in a row (conftest.py groups them), so a module scope would
# start all three again for every checkpoint, about 8 s of CPU each time. Left open, they use none.
@pytest.fixture(scope="session")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Chromium with a fresh profile, no sandbox as root, no background network."""
    if MISSING:
        pytest.fail(f"the browser test must run here (PI_COURSE_REQUIRE_BROWSER=1) but {MISSING}: {FIX}")
    from playwright.async_api import async_playwright

    loop = asyncio.new_event_loop()
    playwright = loop.run_until_complete(async_playwright().start())
    browser = loop.run_until_complete(
        playwright.chromium.launch(
            executable_path=CHROMIUM, args=FLAGS, chromium_sandbox=os.geteuid() != 0, headless=True
        )
    )
    shots = Path(os.environ.get("PI_COURSE_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    try:
        yield Session(loop, playwright, browser, shots)
    finally:
        loop.run_until_complete(asyncio.wait_for(browser.close(), 30))
        loop.run_until_complete(playwright.stop())
        loop.close()


@dataclass(frozen=True)
class Lab:
    """A JupyterLab server on 127.0.0.1 serving `root`."""

    base: str
    token: str
    root: Path

    def api(self, method: str, path: str) -> Any:
        request = urllib.request.Request(
            f"{self.base}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read()
        return json.loads(body) if body else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One JupyterLab for every notebook: its own config, settings and workspaces; no news, no update
    check."""
    home = tmp_path_factory.mktemp("jupyterlab")
    root = home / "notebooks"
    settings = home / "settings"
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}), encoding="utf-8")
    root.mkdir()
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR"):
        env[name] = str(home / name.lower())
    port, token = _free_port(), os.urandom(12).hex()
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={home / 'workspaces'}",
        # `window.jupyterapp`: the test opens each notebook with JupyterLab's own open command.
        "--LabApp.expose_app_in_browser=True",
    ] + (["--allow-root"] if os.geteuid() == 0 else [])
    log = home / "server.log"
    with log.open("w", encoding="utf-8") as output:
        server = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    lab = Lab(f"http://127.0.0.1:{port}", token, root)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                lab.api("GET", "/api/status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start: {log.read_text(encoding='utf-8')[-2000:]}")
                time.sleep(0.25)
        yield lab
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@dataclass
class LabBrowser:
    """JupyterLab loaded once in one page; each notebook is opened in it as a learner opens one from the file
    browser (the app's own `docmanager:open`), not by loading the whole app again (about 5 s each)."""

    lab: Lab
    context: BrowserContext
    guard: Guard
    page: Page | None = None

    async def ready(self) -> Page:
        """The page with JupyterLab loaded and idle; a new one if the last was closed (a crashed renderer)."""
        if self.page is None or self.page.is_closed():
            self.page, _visit = await _page(self.context, self.guard)
            await self.page.goto(f"{self.lab.base}/lab/workspaces/notebooks?token={self.lab.token}")
            # The app object exists before its plugins are activated: wait for the commands the tests
            # run (a loaded machine once ran `application:close-all` before it was registered).
            await _idle(
                self.page,
                "() => !!window.jupyterapp && ['application:close-all', 'docmanager:open']"
                ".every((id) => window.jupyterapp.commands.hasCommand(id))",
            )
        return self.page


@pytest.fixture(scope="session")
def lab_browser(session: Session, jupyterlab: Lab) -> Iterator[LabBrowser]:
    """The context JupyterLab is opened in (requests only to the local server)."""
    guard = Guard(jupyterlab.base)
    context = session.run(_context(session, guard, 1280, 900))
    try:
        yield LabBrowser(jupyterlab, context, guard)
    finally:
        session.run(context.close(), 30)


@pytest.fixture(scope="session")
def viewers(session: Session) -> Iterator[dict[str, Viewer]]:
    """A viewer per width of WIDTHS (a phone: mobile layout and touch); files only, no network."""
    made: dict[str, Viewer] = {}
    try:
        for name, width in WIDTHS.items():
            phone = width < 600
            guard = Guard("file:///")
            context = session.run(
                _context(
                    session,
                    guard,
                    width,
                    844 if phone else 900,
                    is_mobile=phone,
                    has_touch=phone,
                    device_scale_factor=1,
                )
            )
            made[name] = Viewer(context, guard)
        yield made
    finally:
        for viewer in made.values():
            session.run(viewer.context.close(), 30)


# Close what is open, then open the notebook with the command the file browser runs on a double click.
OPEN_NOTEBOOK = """
async (path) => {
  const app = window.jupyterapp;
  await app.commands.execute("application:close-all");
  await app.commands.execute("docmanager:open", {path, factory: "Notebook"});
}
"""


async def _notebook(
    session: Session, browser: LabBrowser, name: str, cells: int
) -> tuple[Visit, list[str], int]:
    """Open `name` in JupyterLab, wait for idle, screenshot it whole; (visit, low-contrast texts, outputs)."""
    page = await browser.ready()
    visit = browser.guard.visit = Visit()
    await page.set_viewport_size({"width": 1280, "height": 900})
    await page.evaluate(OPEN_NOTEBOOK, name)
    # Shown: its tab is in the main area, the one notebook there, with all its cells attached.
    shown = (
        "() => [...document.querySelectorAll('#jp-main-dock-panel .lm-TabBar-tabLabel')]"
        f".some((tab) => tab.textContent === {json.dumps(name)})"
        " && document.querySelectorAll('.jp-Notebook').length === 1"
        f" && document.querySelectorAll('.jp-Notebook .jp-Cell').length >= {cells}"
    )
    await _idle(page, shown)
    outputs: int = await page.evaluate("document.querySelectorAll('.jp-OutputArea-output').length")
    low: list[str] = await page.evaluate(CONTRAST_PROBE, [".jp-OutputArea-output", CONTRAST])
    # A dialog over the notebook (a path not found, a kernel that cannot start) is an error people see.
    dialogs: list[str] = await page.evaluate(
        "[...document.querySelectorAll('.jp-Dialog')].map((d) => d.innerText.slice(0, 200))"
    )
    visit.errors += [f"dialog: {text}" for text in dialogs]
    # The notebook scrolls inside its panel: a window as tall as the notebook shows all of it at once.
    # Cells out of view have estimated heights until they render: measure again once they have, until
    # the window already fits (a third pass has never been needed; the bound keeps a layout that keeps
    # changing from looping).
    height = 900
    for _ in range(3):
        bottom: float = await page.evaluate(
            "(() => { const cells = document.querySelectorAll('.jp-Notebook .jp-Cell');"
            " return cells[cells.length - 1].getBoundingClientRect().bottom + 60; })()"
        )
        fits = min(max(round(bottom), 900), 30000)
        if fits == height:
            break
        height = fits
        await page.set_viewport_size({"width": 1280, "height": height})
        await _settled(page)
    await page.screenshot(path=str(session.shots / f"jupyterlab-{name.removesuffix('.ipynb')}.png"))
    return visit, low, outputs


def _kernels(lab: Lab, name: str) -> list[dict[str, Any]]:
    """The kernels of the notebook `name`'s sessions, as JupyterLab's REST API describes them."""
    return [s["kernel"] for s in lab.api("GET", "/api/sessions") if s.get("path") == name]


class KernelWatch:
    """Watches the notebook's kernels from a thread, from the moment the notebook is opened: when they
    were last seen busy, unconnected or absent (JupyterLab's REST API, every 0.2 s).

    Watched from here, not read from the server's `last_activity`: that time ignores the debugger's
    requests, and a kernel closed before it answered one logged "Could not restore the debugger state:
    Canceled future for debug_request" (seen once in CI). Watching while the page renders, instead of
    after it, lets the second of quiet pass at the same time.
    """

    def __init__(self, lab: Lab, name: str) -> None:
        self.lab, self.name = lab, name
        self.quiet_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                kernels = _kernels(self.lab, self.name)
            except OSError:  # the server did not answer this time: not seen idle, so the count restarts
                kernels = []
            idle = bool(kernels) and all(
                k.get("execution_state") == "idle" and k.get("connections", 0) >= 1 for k in kernels
            )
            self.quiet_since = (self.quiet_since or time.monotonic()) if idle else None
            self._stop.wait(0.2)

    def __enter__(self) -> KernelWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def settled(self) -> None:
        """Wait until the kernels have been connected and idle for a second without a break."""
        deadline = time.monotonic() + BUSY_BOUND
        while time.monotonic() < deadline:
            since = self.quiet_since
            if since is not None and time.monotonic() - since >= 1:
                return
            time.sleep(0.05)
        raise TimeoutError


async def _close_all(browser: LabBrowser) -> None:
    page = await browser.ready()
    await page.evaluate('() => window.jupyterapp.commands.execute("application:close-all")')
    await page.wait_for_function(
        "() => document.querySelectorAll('.jp-Notebook').length === 0", polling="raf", timeout=0
    )


def _kernel_released(lab: Lab, name: str) -> None:
    """Wait until the closed notebook's page holds no connection to its kernel any more.

    Then the kernel can go without JupyterLab waiting on it: a precise condition where a quiet second
    of the page's main thread used to stand in for it.
    """
    deadline = time.monotonic() + BUSY_BOUND
    while time.monotonic() < deadline:
        if all(k.get("connections", 0) == 0 for k in _kernels(lab, name)):
            return
        time.sleep(0.05)
    raise TimeoutError


@pytest.mark.parametrize(("checkpoint_id", "tree"), RUNS)
def test_notebook_opens_in_jupyterlab_goes_idle_and_logs_no_error(
    session: Session, lab_browser: LabBrowser, checkpoint_id: str, tree: str
) -> None:
    """Opened in JupyterLab, does the run notebook go idle within the bound, log no error, and keep text
    readable?"""
    nb = executed(checkpoint_id, tree)
    name = f"{checkpoint_id}-{tree}.ipynb"
    jupyterlab = lab_browser.lab
    nbformat.write(nb, jupyterlab.root / name)  # type: ignore[no-untyped-call]
    try:
        with KernelWatch(jupyterlab, name) as kernel:
            visit, low, outputs = session.run(_notebook(session, lab_browser, name, len(nb.cells)))
            # The page stays open for the next notebook: let the kernel answer what JupyterLab asked it
            # on start (the debugger's state, a subshell), then close the notebook there, before the
            # kernel goes. Killing it under an open notebook logs "Canceled future … before replies
            # were done".
            kernel.settled()
        session.run(_close_all(lab_browser))
        _kernel_released(jupyterlab, name)
    except TimeoutError:
        pytest.fail(f"JupyterLab stayed busy more than {BUSY_BOUND:g} s after opening {name}")
    finally:
        for kernel_session in jupyterlab.api("GET", "/api/sessions"):
            jupyterlab.api("DELETE", f"/api/sessions/{kernel_session['id']}")
    assert visit.errors == [] and visit.refused == []
    assert low == []
    with_outputs = sum(1 for cell in nb.cells if cell.get("outputs"))
    assert outputs >= with_outputs > 0


async def _static(viewer: Viewer, path: Path, shot: Path) -> tuple[Visit, list[str], int]:
    """Open an exported notebook with no network; (visit, low-contrast texts, rendered HTML outputs)."""
    page, visit = await viewer.show(path)
    low: list[str] = await page.evaluate(CONTRAST_PROBE, [".jp-OutputArea-output", CONTRAST])
    shown: int = await page.evaluate("document.querySelectorAll('.jp-RenderedHTMLCommon').length")
    await page.screenshot(path=str(shot), full_page=True)
    return visit, low, shown


@pytest.mark.parametrize("checkpoint_id", [c.id for c in real_checkpoints() if c.notebook])
def test_static_html_export_needs_no_network(
    session: Session, viewers: dict[str, Viewer], checkpoint_id: str, tmp_path: Path
) -> None:
    """Exported with nbconvert --to html, does the notebook show its outputs offline, asking the network for
    nothing it needs?"""
    nb = executed(checkpoint_id, "solution")
    math = [
        cell.source[:60]
        for cell in nb.cells
        if cell.cell_type == "markdown" and ("$" in cell.source or "\\(" in cell.source)
    ]
    assert math == [], "a formula needs MathJax from the network in the static export"
    assert "widgets" not in nb.metadata, "widget state needs require.js from the network in the static export"
    body, _ = HTMLExporter().from_notebook_node(nb)  # type: ignore[no-untyped-call]
    page = tmp_path / f"{checkpoint_id}.html"
    page.write_text(body, encoding="utf-8")
    shot = session.shots / f"static-{checkpoint_id}.png"
    visit, low, shown = session.run(_static(viewers["desktop"], page, shot))
    assert [url for url in visit.refused if not any(part in url for part in NBCONVERT_OPTIONAL)] == []
    assert visit.errors == [] and low == []
    assert shown >= sum(
        1 for cell in nb.cells for out in cell.get("outputs", []) if "text/html" in out.get("data", {})
    )


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the report pages are written (each once, for both widths)."""
    return tmp_path_factory.mktemp("reports")


async def _report(viewer: Viewer, path: Path, shot: Path) -> tuple[Visit, list[str], list[str], str]:
    """Open a report file on `viewer`'s screen; (visit, low contrast, too wide, viewport tag)."""
    page, visit = await viewer.show(path)
    low: list[str] = await page.evaluate(CONTRAST_PROBE, ["body", CONTRAST])
    wide: list[str] = await page.evaluate(OVERFLOW_PROBE)
    viewport: str = await page.evaluate(
        "document.querySelector('meta[name=viewport]')?.getAttribute('content') || ''"
    )
    await page.screenshot(path=str(shot), full_page=True)
    return visit, low, wide, viewport


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("version", class_report.VERSIONS)
def test_class_report_reads_on_desktop_and_phone(
    session: Session,
    viewers: dict[str, Viewer],
    real_course: Course,
    each_checkpoint: Checkpoint,
    version: str,
    width: str,
    reports: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 1280 px and on a 390 px phone, does each version fit the width, keep its text readable and log no
    error?"""
    monkeypatch.setenv(i18n.LANG_ENV, "zh_CN")
    path = reports / f"report-{each_checkpoint.id}-{version}.html"
    if not path.exists():  # one page per version, opened at both widths
        records, mutations = sample_class(real_course, each_checkpoint)
        class_report.write(path, real_course, records, mutations, version=version)
    shot = session.shots / f"report-{each_checkpoint.id}-{version}-{width}.png"
    visit, low, wide, viewport = session.run(_report(viewers[width], path, shot))
    assert visit.errors == [] and visit.refused == []
    assert "width=device-width" in viewport
    assert wide == []
    assert low == []


#: Header cells whose text breaks inside a word: two letters or digits of one word on two lines.
MID_WORD_PROBE = """
() => {
  const broken = [];
  for (const th of document.querySelectorAll("th")) {
    const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent;
      let top = null;
      for (let i = 0; i < text.length; i++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rect = range.getClientRects()[0];
        if (!rect || !text[i].trim()) continue;
        const word = /[A-Za-z0-9]/;
        if (top !== null && rect.top > top + 1 && word.test(text[i]) && word.test(text[i - 1] || "")) {
          broken.push(th.innerText);
        }
        top = rect.top;
      }
    }
  }
  return broken;
}
"""


async def _header_breaks(viewer: Viewer, path: Path) -> tuple[Visit, list[str], str]:
    """Open a report at 1280 px; (visit, header texts broken inside a word, the page's h1)."""
    page, visit = await viewer.show(path)
    broken: list[str] = await page.evaluate(MID_WORD_PROBE)
    heading: str = await page.evaluate("document.querySelector('h1').innerText")
    return visit, broken, heading


@pytest.mark.parametrize("version", class_report.VERSIONS)
def test_class_report_headers_wrap_between_words_under_the_course_title(
    session: Session,
    viewers: dict[str, Viewer],
    real_course: Course,
    version: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 1280 px in English, does no lab-table header of any checkpoint break inside a word ("Wort h"),
    and is the page titled with the whole course's title?"""
    monkeypatch.setenv(i18n.LANG_ENV, "en")
    for checkpoint in real_course.checkpoints:
        if not checkpoint.labs:
            continue
        records, mutations = sample_class(real_course, checkpoint)
        path = tmp_path / f"report-{checkpoint.id}-{version}.html"
        class_report.write(path, real_course, records, mutations, version=version)
        visit, broken, heading = session.run(_header_breaks(viewers["desktop"], path))
        assert visit.errors == [] and visit.refused == []
        assert broken == [], checkpoint.id
        assert heading.endswith(real_course.title_en) and checkpoint.title not in heading
