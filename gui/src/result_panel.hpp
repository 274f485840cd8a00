#pragma once
// The decoded images of the last run: pick one of a batch, save it as PNG with
// its metadata, copy it to the clipboard.

#include <QVector>
#include <QWidget>

#include "engine_types.hpp"

class QComboBox;
class QLabel;

namespace nanscope::gui {

class ResultPanel : public QWidget {
  Q_OBJECT
 public:
  ResultPanel(QAction* save, QAction* copy, QWidget* parent = nullptr);

  void clear();
  void add(const ImageView& image);  // replaces the image with the same batch index
  bool has_image() const;
  const ImageView* current() const;
  int count() const { return images_.size(); }

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void show_current();

  QVector<ImageView> images_;
  QComboBox* pick_;
  QLabel* view_;
  QLabel* info_;
};

}  // namespace nanscope::gui
