// Starts Swagger UI on the API's docs page (templates/api/swagger.html) from the
// settings the page carries, in a file rather than inline: the CSP allows no inline script.
(function () {
  const config = JSON.parse(document.getElementById("swagger-settings").textContent);
  const csrfToken = document.body.dataset.csrfToken;
  config.dom_id = "#swagger-ui";
  config.presets = [SwaggerUIBundle.presets.apis];
  if (csrfToken) {
    config.requestInterceptor = (request) => {
      request.headers["X-CSRFToken"] = csrfToken;
      return request;
    };
  }
  SwaggerUIBundle(config);
})();
