// meshwork-gui [PLAN]: the what-if desk (DESIGN.md, gui/). Opens PLAN, or the default scenario
// when it is found beside the sources.
#include <QApplication>
#include <QCommandLineParser>
#include <QFileInfo>

#include "gui/app/main_window.hpp"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("meshwork-gui");
  QCommandLineParser parser;
  parser.setApplicationDescription("meshwork: plan, estimate and simulate large-model training on GPU clusters");
  parser.addHelpOption();
  parser.addPositionalArgument("plan", "a plan file (YAML or JSON) to open");
  parser.process(app);

  meshwork::gui::MainWindow window;
  const QStringList args = parser.positionalArguments();
  if (!args.isEmpty()) {
    QString error;
    if (!window.open_plan(args.front(), &error)) {
      qCritical("meshwork-gui: %s", qPrintable(error));
      return 1;
    }
  }
  window.show();
  return QApplication::exec();
}
