// Render the math of a page with KaTeX, served with the site (docs/_ext/vendor_assets.py adds this script
// to the pages that have math). pymdownx.arithmatex (generic mode) writes inline math as
// <span class="arithmatex">\(...\)</span> and display math as <div class="arithmatex">\[...\]</div>.
document$.subscribe(({ body }) => {
  for (const el of body.querySelectorAll(".arithmatex")) {
    const tex = el.textContent.trim()
    const display = el.tagName === "DIV"
    katex.render(tex.slice(2, -2), el, { displayMode: display, throwOnError: false })
  }
})
