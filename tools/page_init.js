// Runs in every page before the page's own scripts (tools/check_site.py, Playwright's add_init_script).
// Material draws each Mermaid diagram into a *closed* shadow root, which no script can look into: open them,
// so the check can see the SVG. And mark every Mermaid block before Material replaces it: a block still
// marked later was never drawn.
(() => {
  const attach = Element.prototype.attachShadow
  Element.prototype.attachShadow = function (init) {
    return attach.call(this, { ...init, mode: "open" })
  }
  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("pre.mermaid").forEach((el, i) => el.setAttribute("data-check-mermaid", String(i)))
  }, { once: true })
})()
