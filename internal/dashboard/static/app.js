// Mailvet dashboard: the only script. Everything works without it; it adds a copy button's
// action for keys shown once, and keeps a form from being sent twice. No build step: this file
// is served as it is.
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

// A double click (or Enter pressed twice) on a form sends it once: a second submit of a form
// already sent is cancelled, and its submit buttons are disabled until the page is left. They
// are disabled after the submit event, not in it: the browser leaves a disabled button out of
// the form data, and the spend-cap form's buttons carry their action (name="action").
document.addEventListener("submit", function (ev) {
  var form = ev.target;
  if (ev.defaultPrevented) return;
  if (form.dataset.sent) {
    ev.preventDefault();
    return;
  }
  form.dataset.sent = "1";
  setTimeout(function () {
    form.querySelectorAll("button[type=submit]:enabled, button:not([type]):enabled").forEach(function (b) {
      b.disabled = true;
      b.dataset.sending = "1";
    });
  }, 0);
});

// A page restored from the back/forward cache keeps its DOM: make its forms usable again.
window.addEventListener("pageshow", function () {
  document.querySelectorAll("form[data-sent]").forEach(function (form) {
    delete form.dataset.sent;
    form.querySelectorAll("button[data-sending]").forEach(function (b) {
      b.disabled = false;
      delete b.dataset.sending;
    });
  });
});
