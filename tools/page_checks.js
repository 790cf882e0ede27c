// What tools/check_site.py measures in a page, once it has settled. Returns plain data; the Python side
// decides what is a failure. `minTextPx`: the smallest legible diagram text, in CSS pixels on screen.
(minTextPx) => {
  const content = document.querySelector(".md-content")
  const column = content.getBoundingClientRect()
  const article = content.querySelector("article") || content

  const describe = (el) => {
    let tag = el.tagName.toLowerCase()
    if (el.id) tag += "#" + el.id
    else if (el.classList.length) tag += "." + [...el.classList].slice(0, 2).join(".")
    const text = (el.innerText || el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 70)
    return { tag, text }
  }
  const scrolls = (style) => ["auto", "scroll", "hidden", "clip"].includes(style.overflowX)
  const inTable = (el) => el.closest("table, .md-typeset__scrollwrap, .md-typeset__table") !== null

  // 1. Elements past the column's edges (the outermost one of each), and boxes that hide part of their content.
  const overflow = [], cut = []
  const reported = new Set(), clipped = new Set()
  for (const el of article.querySelectorAll("*")) {
    const style = getComputedStyle(el)
    if (style.display === "none" || style.visibility === "hidden" || style.position === "fixed") continue
    const parent = el.parentElement
    const box = el.getBoundingClientRect()
    if (box.width <= 1 && box.height <= 1 && style.overflow === "hidden") {
      clipped.add(el)  // visually hidden on purpose (for screen readers: KaTeX's MathML, ...)
      continue
    }
    const insideClip = parent !== null && clipped.has(parent)
    if (insideClip || scrolls(style)) clipped.add(el)
    if (scrolls(style) && el.scrollWidth > el.clientWidth + 1 && !insideClip) {
      cut.push({ ...describe(el), table: inTable(el), shown: el.clientWidth, needs: el.scrollWidth })
    }
    if (insideClip || (parent !== null && reported.has(parent))) {
      if (parent !== null && reported.has(parent)) reported.add(el)
      continue
    }
    if (box.width === 0 && box.height === 0) continue
    if (box.right > column.right + 1 || box.left < column.left - 1) {
      reported.add(el)
      overflow.push({ ...describe(el), table: inTable(el), width: Math.round(box.width),
                      past: Math.round(Math.max(box.right - column.right, column.left - box.left)) })
    }
  }

  // 2. Code blocks whose lines wrap (stylesheets/extra.css): fine for code; a text drawing or aligned
  // columns (box-drawing or arrow characters, ' | ' twice, or three runs of spaces inside one line) break.
  const wrapped = []
  for (const code of article.querySelectorAll("pre > code")) {
    const lines = [...code.querySelectorAll(':scope > span[id^="__span-"]')]
    if (!lines.length) continue
    const style = getComputedStyle(code)
    const one = parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize)
    const count = lines.filter((l) => l.getBoundingClientRect().height > 1.5 * one).length
    if (!count) continue
    const block = code.closest(".highlight")
    const language = block ? [...block.classList].find((c) => c.startsWith("language-")) : undefined
    const text = code.textContent
    const drawing = (!language || language === "language-text") && (
      /[\u2190-\u21ff\u2500-\u257f]/.test(text) ||
      text.split("\n").some((l) => l.split(" | ").length > 2 || (l.match(/\S {2,}(?=\S)/g) || []).length >= 3))
    wrapped.push({ ...describe(code), lines: lines.length, count, drawing })
  }

  // 3. Mermaid: every block drawn as an SVG that fits, with text large enough to read.
  const mermaid = []
  for (const el of document.querySelectorAll("[data-check-mermaid]")) {
    mermaid.push({ problem: "not drawn (still Mermaid source)", ...describe(el) })
  }
  const diagrams = []
  for (const host of article.querySelectorAll("div.mermaid")) {
    const svg = host.shadowRoot && host.shadowRoot.querySelector("svg")
    if (!svg) {
      mermaid.push({ problem: "no SVG", ...describe(host) })
      continue
    }
    const box = svg.getBoundingClientRect()
    const viewBox = svg.viewBox && svg.viewBox.baseVal
    const scale = viewBox && viewBox.width ? box.width / viewBox.width : 1
    let smallest = Infinity, sample = ""
    for (const t of svg.querySelectorAll("text, tspan, span, p, div")) {
      const own = [...t.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())
      if (!own) continue
      const px = parseFloat(getComputedStyle(t).fontSize) * scale
      if (px < smallest) { smallest = px; sample = t.textContent.trim().slice(0, 40) }
    }
    const label = (svg.getAttribute("aria-roledescription") || "diagram") + " '" + sample + "'"
    diagrams.push({ label, width: Math.round(box.width), textPx: Math.round(smallest * 10) / 10 })
    if (smallest < minTextPx) {
      mermaid.push({ problem: `text ${smallest.toFixed(1)} px on screen (under ${minTextPx})`, tag: "svg", text: label })
    }
    if (box.right > column.right + 1) {
      mermaid.push({ problem: `${Math.round(box.right - column.right)} px past the column`, tag: "svg", text: label })
    }
  }

  // 4. Math typeset by KaTeX, without errors.
  const math = []
  for (const el of article.querySelectorAll(".arithmatex")) {
    if (!el.querySelector(".katex") || el.querySelector(".katex-error")) math.push(describe(el))
  }

  // 5. Images loaded; how far each is scaled down (text in a plot shrinks with it).
  const images = []
  for (const img of document.querySelectorAll("img")) {
    images.push({ src: img.currentSrc || img.src, loaded: img.complete && img.naturalWidth > 0,
                  shown: Math.round(img.getBoundingClientRect().width), natural: img.naturalWidth })
  }

  // 6. Links and ids (Python resolves them against the built site), and doctest blocks' copy text.
  const links = [...new Set([...document.querySelectorAll("a[href]")].map((a) => a.href))]
  const copies = []
  for (const pre of article.querySelectorAll("pre")) {
    const code = pre.querySelector("code")
    const shown = (code ? code.textContent : pre.textContent).trimStart()
    if (shown.startsWith(">>>")) copies.push({ copy: pre.getAttribute("data-copy"), text: shown.slice(0, 70) })
  }

  const page = document.scrollingElement
  return { overflow, cut, wrapped, mermaid, diagrams, math, images, links, copies,
           pageWidth: page.scrollWidth, viewportWidth: window.innerWidth }
}
