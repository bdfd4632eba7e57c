// Mailvet dashboard: the only script. Everything works without it; it adds a copy button's
// action for keys shown once. No build step: this file is served as it is.
"use strict";
document.addEventListener("click", function (ev) {
  var btn = ev.target.closest("button.copy");
  if (!btn) return;
  var field = document.getElementById(btn.dataset.copy);
  if (!field) return;
  field.select();
  var done = function () { btn.textContent = "Copied"; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(field.value).then(done, function () { document.execCommand("copy"); done(); });
  } else {
    document.execCommand("copy");
    done();
  }
});
