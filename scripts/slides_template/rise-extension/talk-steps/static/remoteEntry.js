/* The talk in RISE (jupyterlab-rise 0.42), loaded as a JupyterLab federated extension by
   `make talk` (RISE lists the extensions of one folder, and the lab's server serves their
   files: the Makefile's RISE_FLAGS name the folder to both). Plain JavaScript, no build:
   the container below is the interface JupyterLab loads an extension through
   (window._JUPYTERLAB[name].init / .get).

   * One key per step. RISE's own Shift+Enter runs the cell and selects the next one, but
     never shows the fragment or slide that holds it (its "smart exec" is unfinished), so a
     result in a fragment stays hidden until Space. Here Shift+Enter does one step: if the
     selected cell is not on screen yet, it first shows it (its slide, or the fragment that
     holds it); then it runs it and selects the next cell a slide shows (notes and skipped
     cells are passed over). The next cell is not shown before the next press, so a result
     is never moved off screen by the press that made it. body[data-talk-step] says which
     cell the last press ran ("<presses>:<cell index>").
   * A sign while the kernel works: body[data-talk-kernel] holds the kernel's status
     ("busy", "idle", ...), which talk.css turns into a sign in the corner. */
(function () {
  'use strict';

  const slideType = (cell) => {
    const slideshow = cell.model.getMetadata ? cell.model.getMetadata('slideshow')
      : (cell.model.metadata.get && cell.model.metadata.get('slideshow'));
    return (slideshow && slideshow.slide_type) || '-';
  };

  const leafSection = (node) => node.closest('section');

  /* On screen: on the slide shown, and not in a fragment still hidden. */
  const onScreen = (node) => {
    const section = leafSection(node);
    if (!section || !section.classList.contains('present')) return false;
    const fragment = node.closest('.fragment');
    return !fragment || fragment.classList.contains('visible');
  };

  /* Reveal's own API through its postMessage interface (reveal.js listens for it;
     RISE keeps its Reveal object to itself). */
  const reveal = (method, args) =>
    window.postMessage(JSON.stringify({ method, args }), window.location.origin);

  const show = (node) => {
    const leaf = leafSection(node);
    if (!leaf) return;
    const top = leaf.parentElement.closest('section') || leaf;
    const slides = [...top.parentElement.children].filter((s) => s.tagName === 'SECTION');
    const h = slides.indexOf(top);
    const v = top === leaf ? 0
      : [...top.children].filter((s) => s.tagName === 'SECTION').indexOf(leaf);
    const fragment = node.closest('.fragment');
    const f = fragment ? Number(fragment.getAttribute('data-fragment-index')) : -1;
    reveal('slide', [h, v, f]);
  };

  /* The cell the next press runs. Selecting a cell on a later slide makes RISE show that
     slide at once (reveal.js follows the focus), so the next cell is selected only when its
     press comes; a cell the speaker clicked meanwhile goes first. */
  let next = null;
  let last = null;
  let steps = 0;

  const step = async (app, notebook) => {
    const clicked = notebook.activeCellIndex !== last;
    const index = next === null || clicked ? notebook.activeCellIndex : next;
    const cell = notebook.widgets[index];
    if (!cell) return;
    notebook.activeCellIndex = index;
    notebook.mode = 'command';
    if (!onScreen(cell.node)) show(cell.node);
    const ran = app.commands.execute('notebook:run-cell');
    let after = index + 1;
    while (after < notebook.widgets.length
           && ['notes', 'skip'].includes(slideType(notebook.widgets[after]))) after += 1;
    next = after < notebook.widgets.length ? after : null;
    last = index;
    steps += 1;
    document.body.dataset.talkStep = `${steps}:${index}`;  // what the last press ran
    await ran;
  };

  const watchKernel = (panel) => {
    const mark = () => {
      const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
      document.body.dataset.talkKernel = kernel ? kernel.status : 'none';
    };
    panel.sessionContext.statusChanged.connect(mark);
    panel.sessionContext.connectionStatusChanged.connect(mark);
    panel.sessionContext.kernelChanged.connect(mark);
    mark();
  };

  const plugin = {
    id: 'talk-steps:plugin',
    autoStart: true,
    activate: (app) => {
      if (app.name !== 'Rise') return;  // the lab serves this file too: only RISE uses it
      let watched = null;
      const notebookPanel = () => {
        const panel = app.shell.currentWidget;
        if (panel && panel.sessionContext && panel !== watched) {
          watched = panel;
          watchKernel(panel);
        }
        return panel && panel.content && panel.content.widgets ? panel : null;
      };
      const timer = setInterval(() => { if (notebookPanel()) clearInterval(timer); }, 250);
      // Before JupyterLab's own shortcut handler (document, capture): this one is on window.
      window.addEventListener('keydown', (event) => {
        if (event.key !== 'Enter' || !event.shiftKey || event.ctrlKey || event.metaKey
            || event.altKey || !document.body.classList.contains('rise-enabled')) return;
        const panel = notebookPanel();
        if (!panel || !panel.node.contains(event.target)) return;
        event.preventDefault();
        event.stopImmediatePropagation();
        step(app, panel.content).catch((error) => console.warn('talk step:', error));
      }, true);
    }
  };

  window._JUPYTERLAB = window._JUPYTERLAB || {};
  window._JUPYTERLAB['talk-steps'] = {
    init: () => Promise.resolve(),
    get: (module) => Promise.resolve(() => ({ __esModule: true, default: [plugin] }))
  };
})();
