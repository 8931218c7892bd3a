// Starts Swagger UI on /docs (an external script: the page CSP allows no inline one).
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.getAttribute("data-openapi-url"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    layout: "BaseLayout",
    presets: [window.SwaggerUIBundle.presets.apis],
    showExtensions: true,
    showCommonExtensions: true,
  });
})();
