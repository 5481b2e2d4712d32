// @ts-check
/**
 * The API documentation page (DOM): Swagger UI, vendored in
 * `static/picoflow_web/vendor/swagger-ui/` and loaded by the page before this module,
 * renders the OpenAPI document the page names in `#pf-api-docs[data-spec-url]`.
 *
 * The options keep the page inside the site's Content-Security-Policy: no call to the
 * public validator (its badge is an image from another origin), no remote configuration
 * read from the query string. "Try it out" runs as the logged-in user (the session
 * cookie); an unsafe method carries Django's CSRF token as the dashboard's own calls do.
 *
 * Stable DOM hooks (browser tests rely on them):
 *   #pf-api-docs[data-spec-url]            where Swagger UI draws
 *   #pf-api-docs[data-ready=1]             once the document has been read and drawn
 */

import { csrfToken } from "./api.js";

const SAFE = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * @param {HTMLElement} root
 */
export function mountApiDocs(root) {
  /** @type {any} */
  const swagger = Reflect.get(globalThis, "SwaggerUIBundle");
  if (typeof swagger !== "function") {
    root.textContent = "The API documentation viewer did not load.";
    return;
  }
  swagger({
    url: root.dataset.specUrl,
    domNode: root,
    deepLinking: true,
    validatorUrl: null,
    queryConfigEnabled: false,
    presets: [swagger.presets.apis],
    layout: "BaseLayout",
    requestInterceptor: (/** @type {{method?: string, url: string, headers: Record<string, string>}} */ request) => {
      const sameOrigin = new URL(request.url, location.href).origin === location.origin;
      if (sameOrigin && !SAFE.has((request.method ?? "GET").toUpperCase())) {
        request.headers["X-CSRFToken"] = csrfToken();
      }
      return request;
    },
    onComplete: () => { root.dataset.ready = "1"; },
  });
}

const root = typeof document === "undefined" ? null : document.getElementById("pf-api-docs");
if (root) mountApiDocs(root);
