// What the audience sees in the current slide state, measured on every visible element.
// Evaluated by scripts/build_slides.py (to fit a deck) and by the browser tests (to judge
// it), in an offline reveal.js deck and in RISE alike. Argument: {floors, width, height},
// floors in CSS pixels as rendered: {code, prose, output, figure} (absent: not judged).
// Returns {cells: [[id, top, bottom], ...], bottom, right, problems: [...]}.
({floors, width, height}) => {
  const problems = [];
  if (!document.getElementById('probe-no-transitions')) {  // judge the end of every fade
    const style = document.createElement('style');
    style.id = 'probe-no-transitions';
    style.textContent = '*, *::before, *::after { transition: none !important; animation: none !important; }';
    document.head.appendChild(style);
  }
  const leaf = [...document.querySelectorAll('.reveal .slides section.present')]
    .filter((s) => !s.querySelector('section'))[0];
  if (!leaf) return {cells: [], bottom: 0, right: 0, problems: ['no slide is shown']};

  const slides = document.querySelector('.reveal .slides');
  const style = getComputedStyle(slides);
  let scale = parseFloat(style.zoom || '1') || 1;
  if (style.transform && style.transform !== 'none') scale *= new DOMMatrix(style.transform).a;

  const shown = (el) => {
    const s = getComputedStyle(el);
    if (s.visibility !== 'visible' || s.display === 'none') return false;
    for (let a = el; a && a !== leaf; a = a.parentElement) {
      if (parseFloat(getComputedStyle(a).opacity) === 0) return false;
    }
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const snippet = (el) => (el.textContent || el.getAttribute('src') || el.tagName)
    .trim().replace(/\s+/g, ' ').slice(0, 50);

  // Cells: the deck's .jp-Cell, RISE's too; their extent is that of their visible parts.
  const cells = [];
  let bottom = 0, right = 0;
  const cellOf = (el) => el.closest('.jp-Cell');
  const extent = new Map();
  const offenders = new Set();
  for (const el of leaf.querySelectorAll('*')) {
    if (el.closest('aside.notes, .jp-InputPrompt, .jp-OutputPrompt, .jp-cell-toolbar, .jp-Toolbar, .jp-CellFooter, .jp-Collapser')) continue;
    if (!shown(el)) continue;
    const r = el.getBoundingClientRect();
    bottom = Math.max(bottom, r.bottom);
    right = Math.max(right, r.right);
    const off = r.bottom > height + 1 || r.right > width + 1 || r.top < -1 || r.left < -1;
    if (off) offenders.add(el);
    if (off && !offenders.has(el.parentElement)) {  // the outermost element that runs off
      problems.push(`off the screen (${Math.round(r.left)},${Math.round(r.top)})-` +
                    `(${Math.round(r.right)},${Math.round(r.bottom)}): ${snippet(el)}`);
    }
    const s = getComputedStyle(el);
    const clipsX = s.overflowX !== 'visible' && el.scrollWidth > el.clientWidth + 1;
    const clipsY = s.overflowY !== 'visible' && el.scrollHeight > el.clientHeight + 1;
    if ((clipsX || clipsY) && el.clientHeight > 0 && !el.closest('.cm-gutters')) {
      problems.push(`cut (scrolls ${clipsX ? 'sideways' : 'down'}): ${snippet(el)}`);
    }
    const cell = cellOf(el);
    if (cell) {
      const [top, bot] = extent.get(cell) || [Infinity, -Infinity];
      extent.set(cell, [Math.min(top, r.top), Math.max(bot, r.bottom)]);
    }
  }
  for (const [cell, [top, bot]] of extent) {
    const id = (cell.id || cell.getAttribute('data-id') || '').replace('cell-id=', '');
    cells.push([id, Math.round(top), Math.round(bot)]);
  }
  const order = [...leaf.querySelectorAll('.jp-Cell')];
  cells.sort((a, b) => a[1] - b[1]);

  // A heading alone: every visible cell is a markdown cell holding only headings.
  const visibleCells = order.filter((c) => extent.has(c));
  const headingOnly = (c) => {
    const md = c.querySelector('.jp-RenderedMarkdown, .jp-MarkdownOutput');
    if (!md) return false;
    const kids = [...md.children].filter((k) => shown(k));
    return kids.length > 0 && kids.every((k) => /^H[1-6]$/.test(k.tagName));
  };
  if (visibleCells.length && visibleCells.every(headingOnly)) {
    problems.push(`a heading alone: ${snippet(visibleCells[0])}`);
  }

  // Text sizes as rendered, by what the text is.
  const kindOf = (el) => {
    if (el.closest('.jp-OutputArea, .jp-OutputArea-output')) return 'output';
    if (el.closest('.jp-InputArea .cm-editor, .jp-InputArea-editor, .jp-CodeCell .jp-InputArea'))
      return 'code';
    if (el.closest('pre, code')) return 'code';
    if (el.closest('.jp-RenderedMarkdown, .jp-MarkdownOutput, .jp-MarkdownCell')) return 'prose';
    return null;
  };
  const smallest = {};
  for (const el of leaf.querySelectorAll('*')) {
    if (el.closest('svg') || !cellOf(el) || !shown(el)) continue;
    const text = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!text) continue;
    const kind = kindOf(el);
    if (!kind || floors[kind] === undefined) continue;
    const px = parseFloat(getComputedStyle(el).fontSize) * scale;
    const name = `<${el.tagName.toLowerCase()} class="${el.className}">`;
    if (!(kind in smallest) || px < smallest[kind][0]) smallest[kind] = [px, `${name} ${snippet(el)}`];
  }
  for (const [kind, [px, where]] of Object.entries(smallest)) {
    if (px < floors[kind] - 0.01)
      problems.push(`${kind} text ${px.toFixed(1)}px < ${floors[kind]}px: ${where}`);
  }

  // Figures: text in an SVG (inline or as an image) scaled as drawn; a PNG cannot be read.
  if (floors.figure !== undefined) {
    const svgFontPx = (svg) => {
      const sizes = [];
      for (const t of svg.querySelectorAll('text, tspan')) {
        const size = t.style.fontSize || (t.style.font || '').match(/([\d.]+)px/)?.[1] ||
                     t.getAttribute('font-size');
        if (size) sizes.push(parseFloat(size));
      }
      return sizes.length ? Math.min(...sizes) : null;
    };
    const check = (svg, renderedWidth, where) => {
      const box = svg.viewBox && svg.viewBox.baseVal;
      const units = box && box.width ? box.width : parseFloat(svg.getAttribute('width'));
      const font = svgFontPx(svg);
      if (font === null || !units) return;
      const px = font * renderedWidth / units;
      if (px < floors.figure - 0.01)
        problems.push(`figure text ${px.toFixed(1)}px < ${floors.figure}px: ${where}`);
    };
    for (const svg of leaf.querySelectorAll('svg')) {
      if (!cellOf(svg) || !shown(svg) || svg.closest('.jp-Toolbar, .jp-Collapser')) continue;
      if (!svg.querySelector('text')) continue;
      check(svg, svg.getBoundingClientRect().width, 'inline svg');
    }
    for (const img of leaf.querySelectorAll('img')) {
      if (!cellOf(img) || !shown(img)) continue;
      const src = img.getAttribute('src') || '';
      if (!src.startsWith('data:image/svg+xml')) {
        problems.push(`a figure whose text cannot be measured (draw it as SVG): ${src.slice(0, 40)}`);
        continue;
      }
      const body = src.slice(src.indexOf(',') + 1);
      const xml = src.includes(';base64,') ? atob(body) : decodeURIComponent(body);
      const svg = new DOMParser().parseFromString(xml, 'image/svg+xml').documentElement;
      check(svg, img.getBoundingClientRect().width, 'svg image');
    }
  }
  return {cells, bottom: Math.round(bottom), right: Math.round(right), problems};
}
