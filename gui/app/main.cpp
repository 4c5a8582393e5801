// meshwork-gui [PLAN]: the what-if desk (docs/DESIGN.md, gui/). Opens PLAN when given.
#include <QApplication>
#include <QCommandLineParser>
#include <cstring>

#include "gui/app/main_window.hpp"

namespace {

void describe(QCommandLineParser& parser) {
  parser.setApplicationDescription("meshwork: plan, estimate and simulate large-model training on GPU clusters");
  parser.addHelpOption();
  parser.addPositionalArgument("plan", "a plan file (YAML or JSON) to open");
}

}  // namespace

int main(int argc, char** argv) {
  // --help needs no display: answer it before a QApplication looks for one.
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      QCoreApplication core(argc, argv);
      QCoreApplication::setApplicationName("meshwork-gui");
      QCommandLineParser parser;
      describe(parser);
      parser.process(core);  // prints the help and exits
    }
  }
  QApplication app(argc, argv);
  QApplication::setApplicationName("meshwork-gui");
  QCommandLineParser parser;
  describe(parser);
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
